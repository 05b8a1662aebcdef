"""One person with two tabs of the dashboard open: what one tab did, the other's stale page
must neither repeat nor meet as a bare error page."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import APIResponse, Route

from ordering.models import Coupon, Dish
from tenants.models import ApiClient, Membership, Tenant
from tests.browser.test_dashboard import log_in, open_shop
from tests.dashboard.factories import PASSWORD, make_order
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize(
    ("second", "button"),
    [("remove", "Remove"), ("change-role", "Change")],
    ids=["remove-again", "change-role-of-removed"],
)
def test_a_member_removed_in_one_tab_is_met_in_the_other_with_the_members_and_a_word(
    page, live_server, second, button
):
    """Tab A removes a cook; tab B, still showing the cook, removes them again (or changes
    their role). B gets the members page as it is now, with a message, still a 404 as for an
    id that never was this restaurant's; nothing else changes (red: a bare "Not found" page,
    as if the person had typed a wrong address)."""
    shop = open_shop()
    cook = User.objects.create_user("cook", password=PASSWORD)
    Membership.objects.create(user=cook, tenant=shop.tenant, role=Membership.Role.STAFF)
    log_in(page, live_server.url, "roma-owner", "/dashboard/members/")
    other_tab = page.context.new_page()
    other_tab.goto(f"{live_server.url}/dashboard/members/")
    cook_row = 'tr:has-text("cook")'

    with page.expect_navigation():
        page.locator(cook_row).get_by_role("button", name="Remove").click()
    assert "Removed cook." in page.locator(".messages").inner_text()

    with other_tab.expect_navigation() as answer:
        other_tab.locator(cook_row).get_by_role("button", name=button).click()

    assert answer.value.status == 404
    assert other_tab.get_by_role("heading", name="Members").is_visible()
    assert "not a member here (removed already" in other_tab.locator(".messages").inner_text()
    assert other_tab.locator(cook_row).count() == 0
    assert other_tab.locator('tr:has-text("roma-owner")').count() == 1
    assert list(Membership.objects.filter(tenant=shop.tenant).values_list("role", flat=True)) == [
        Membership.Role.OWNER
    ]


def test_a_stale_dish_page_saving_the_stock_does_not_undo_a_price_set_in_another_tab(
    page, live_server
):
    """Tab A sets Margherita's price; tab B, opened before, sets only its stock, then only
    its price. B's stock is saved without writing back the price B was shown; B's price,
    set over one B never saw, is refused with the price now, and saved again it stands
    (red: A's price silently undone by B's stock save)."""
    shop = open_shop()
    dish = shop.dishes["Margherita"]
    url = f"/dashboard/menu/{dish.pk}/"
    log_in(page, live_server.url, "roma-owner", url)
    stale = page.context.new_page()
    stale.goto(f"{live_server.url}{url}")
    stale_again = page.context.new_page()
    stale_again.goto(f"{live_server.url}{url}")

    page.fill("#id_price", "9.90")
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    assert "Saved Margherita." in page.locator(".messages").inner_text()

    stale.fill("#id_stock", "12")
    with stale.expect_navigation():
        stale.get_by_role("button", name="Save").click()
    assert "Saved Margherita." in stale.locator(".messages").inner_text()
    assert Dish.all_tenants.values_list("price", "stock").get(pk=dish.pk) == (Decimal("9.90"), 12)

    stale_again.fill("#id_price", "7.00")
    with stale_again.expect_navigation() as answer:
        stale_again.get_by_role("button", name="Save").click()
    assert answer.value.status == 400
    assert "price was changed to 9.90" in stale_again.locator(".errorlist").inner_text()
    assert Dish.all_tenants.values_list("price", "stock").get(pk=dish.pk) == (Decimal("9.90"), 12)
    # shown again with the price as typed and the stock as it is now: saved, both stand
    assert stale_again.locator("#id_price").input_value() == "7.00"
    assert stale_again.locator("#id_stock").input_value() == "12"
    with stale_again.expect_navigation():
        stale_again.get_by_role("button", name="Save").click()
    assert Dish.all_tenants.values_list("price", "stock").get(pk=dish.pk) == (Decimal("7.00"), 12)


def test_a_coupon_deactivated_in_one_tab_is_said_to_be_so_in_the_other(page, live_server):
    """Tab B, still showing the coupon active, deactivates it after tab A did: nothing more
    happens, and B reads that it was deactivated already (red: "Coupon WELCOME no longer
    applies to new orders.", as if B's press had done it)."""
    shop = open_shop()
    Coupon.objects.for_tenant(shop.tenant).create(
        tenant=shop.tenant, code="WELCOME", kind=Coupon.Kind.AMOUNT, value=Decimal("2.00")
    )
    log_in(page, live_server.url, "roma-owner", "/dashboard/coupons/")
    other_tab = page.context.new_page()
    other_tab.goto(f"{live_server.url}/dashboard/coupons/")
    deactivate = 'tr:has-text("WELCOME") button:has-text("Deactivate")'

    with page.expect_navigation():
        page.locator(deactivate).click()
    assert "no longer applies to new orders" in page.locator(".messages").inner_text()
    with other_tab.expect_navigation():
        other_tab.locator(deactivate).click()

    said = other_tab.locator(".messages").inner_text()
    assert "Coupon WELCOME was deactivated already; nothing changed." in said
    assert "no longer applies" not in said
    assert not Coupon.all_tenants.get(code="WELCOME").active


def test_a_board_left_open_follows_a_switch_of_restaurant_made_in_another_tab(page, live_server):
    """A user of two restaurants watches Roma's board; in another tab they switch to Kyoto
    (the session's choice, every tab's). The board's next refresh shows Kyoto's orders on a
    page that says Kyoto, never Kyoto's cards under Roma's name (red: the columns were
    swapped in, the top bar and "payments under review" still Roma's)."""
    shop = open_shop()
    kyoto = Tenant.objects.create(slug="sushi-kyoto", name="Sushi Kyoto")
    nigiri = Dish.objects.for_tenant(kyoto).create(
        tenant=kyoto, name="Nigiri", price=Decimal("12.00"), stock=10
    )
    theirs = make_order(kyoto, nigiri)
    Membership.objects.create(user=shop.owner, tenant=kyoto, role=Membership.Role.OWNER)
    log_in(page, live_server.url, "roma-owner")
    page.locator("#tenant-switch").select_option(str(shop.tenant.pk))
    with page.expect_navigation():
        page.get_by_role("button", name="Switch").click()
    assert page.locator("#tenant-switch").input_value() == str(shop.tenant.pk)

    other_tab = page.context.new_page()
    other_tab.goto(f"{live_server.url}/dashboard/")
    other_tab.locator("#tenant-switch").select_option(str(kyoto.pk))
    with other_tab.expect_navigation():
        other_tab.get_by_role("button", name="Switch").click()

    page.locator(f'[data-order-id="{theirs.pk}"]').wait_for()  # the board refreshes every second
    assert page.locator("#tenant-switch").input_value() == str(kyoto.pk)


def test_keys_issued_in_two_tabs_at_once_are_each_shown_in_their_own_tab(page, live_server):
    """The owner issues "POS" in one tab and "Kiosk" in another; POS's page (the answer's
    redirect) is slow to load and arrives after Kiosk's submit. Each tab shows its own key,
    named (red: Kiosk's submit overwrote POS's key in the session, so POS's secret was shown
    nowhere, or Kiosk's shown in POS's tab, unnamed)."""
    shop = open_shop()
    log_in(page, live_server.url, "roma-owner", "/dashboard/api-keys/")
    kiosk_tab = page.context.new_page()
    kiosk_tab.goto(f"{live_server.url}/dashboard/api-keys/")
    held: list[tuple[Route, APIResponse]] = []

    def hold_the_answer(route: Route) -> None:
        if route.request.method != "POST" or held:
            route.continue_()
            return
        # the server issues the key now; its answer (the redirect) reaches the tab below
        held.append((route, route.fetch(max_redirects=0)))

    page.route("**/dashboard/api-keys/", hold_the_answer)
    page.fill("#id_name", "POS")
    page.get_by_role("button", name="Create key").click(no_wait_after=True)
    wait_until(lambda: held or page.wait_for_timeout(20), what="POS issued")
    kiosk_tab.fill("#id_name", "Kiosk")
    with kiosk_tab.expect_navigation():
        kiosk_tab.get_by_role("button", name="Create key").click()
    route, answer = held[0]
    with page.expect_navigation():
        route.fulfill(response=answer)
    page.wait_for_load_state("load")

    issued = {c.name: c for c in ApiClient.objects.filter(tenant=shop.tenant)}
    for tab, name in [(page, "POS"), (kiosk_tab, "Kiosk")]:
        panel = tab.locator("section.new-key")
        assert name in panel.inner_text()
        key = tab.locator("#new-key-value").input_value()
        assert key.split(".")[0] == issued[name].prefix


def test_signing_in_again_in_a_second_tab_lands_on_its_page_signed_in(page, live_server):
    """The session ended with two tabs open: each shows the sign-in page, leading back to its
    own page. The owner signs in in one, then (that tab forgotten) in the other, whose form
    was shown before the first sign-in changed the CSRF secret. The second lands on its page,
    told that they are signed in already (red: "This form has expired… cookies are blocked",
    and reloading sent the stale form again to the same page)."""
    open_shop()
    coupons_tab = page.context.new_page()
    page.goto(f"{live_server.url}/dashboard/menu/")
    coupons_tab.goto(f"{live_server.url}/dashboard/coupons/")
    for tab in (page, coupons_tab):
        tab.fill("#id_username", "roma-owner")
        tab.fill("#id_password", PASSWORD)

    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    with coupons_tab.expect_navigation():
        coupons_tab.get_by_role("button", name="Log in").click()

    assert page.url == f"{live_server.url}/dashboard/menu/"
    assert coupons_tab.url == f"{live_server.url}/dashboard/coupons/"
    assert coupons_tab.locator("h1").inner_text() == "Coupons"
    assert "signed in already as roma-owner" in coupons_tab.locator(".messages").inner_text()
