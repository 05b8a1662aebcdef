"""The dashboard in a real browser: log in, watch an API order arrive, double-click "Accept",
find the absorbed duplicate in the staff admin; screenshots under test-artifacts/."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Route

from idempotency.audit import AuditEvent, save_events
from idempotency.models import DuplicateAudit
from idempotency.stores.audit_stream import drain_audits
from ordering.models import Dish, OrderStatus, OrderTransition
from tenants.models import Membership, PasswordToReplace, Tenant
from tests.browser.conftest import screenshot
from tests.dashboard.factories import PASSWORD, make_merchant, make_order
from tests.support.auth import diner_token
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]
S = OrderStatus


@dataclass
class Shop:
    tenant: Tenant
    owner: User
    dishes: dict[str, Dish]


def open_shop() -> Shop:
    tenant = Tenant.objects.create(slug="trattoria-roma", name="Trattoria Roma")
    dishes = {
        name: Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name=name, price=Decimal(price), stock=80
        )
        for name, price in [("Margherita", "8.50"), ("Carbonara", "11.00"), ("Tiramisu", "5.50")]
    }
    return Shop(tenant=tenant, owner=make_merchant(tenant, "roma-owner"), dishes=dishes)


def log_in(page, base_url: str, username: str, next_url: str = "/dashboard/") -> None:
    page.goto(f"{base_url}{next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}{next_url}")


def hold_first_answer(route: Route, held: list[Route]) -> None:
    """Route handler: send the first request to the server but keep its answer from the
    browser (``held`` gets the route); let every later request through."""
    if held:
        route.continue_()
        return
    route.fetch()  # the server handles the submit; its reply is dropped
    held.append(route)


def place_via_api(base_url: str, key: str, items: list[dict], token: str) -> httpx.Response:
    """Place an order as diner ``diner-42`` (its session's Bearer ``token``)."""
    return httpx.post(
        f"{base_url}/api/v1/orders/",
        json={"items": items, "payment_method": "card"},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        timeout=10,
    )


def test_log_in_and_an_order_placed_through_the_api_appears_on_the_board(page, live_server):
    shop = open_shop()
    d = shop.dishes
    for dish, status in [
        (d["Margherita"], S.PAID),
        (d["Carbonara"], S.PAID),
        (d["Tiramisu"], S.ACCEPTED),
        (d["Carbonara"], S.PREPARING),
        (d["Margherita"], S.READY),
        (d["Margherita"], S.DELIVERING),
        (d["Tiramisu"], S.COMPLETED),
        (d["Carbonara"], S.CANCELLED),
    ]:
        make_order(shop.tenant, dish, status, quantity=2)
    api_key = diner_token(shop.tenant, "diner-42")

    page.goto(f"{live_server.url}/dashboard/")
    assert "/dashboard/login/" in page.url  # anonymous: sent to log in
    log_in(page, live_server.url, "roma-owner")
    assert page.get_by_role("heading", name="Orders", exact=True).is_visible()
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    placed = place_via_api(
        live_server.url,
        f"app-{uuid.uuid4()}",
        [
            {"dish_id": d["Margherita"].pk, "quantity": 1},
            {"dish_id": d["Tiramisu"].pk, "quantity": 2},
        ],
        api_key,
    )
    assert placed.status_code == 201, placed.text
    order_id = placed.json()["id"]

    card = page.locator(f'section[aria-labelledby="col-CREATED"] [data-order-id="{order_id}"]')
    card.wait_for(state="visible", timeout=5_000)  # the board polls every second here
    assert page.evaluate("window.__sameDocument") is True
    assert "2\u00d7 Tiramisu" in card.inner_text()
    assert page.locator("#board-updated").inner_text().startswith("Updated")
    screenshot(page, "board-live.png")


def test_double_click_on_accept_moves_the_order_once_and_staff_see_the_duplicate(page, live_server):
    shop = open_shop()
    order = make_order(shop.tenant, shop.dishes["Carbonara"], S.PAID, quantity=2)
    User.objects.create_superuser("staff", password=PASSWORD)
    log_in(page, live_server.url, "roma-owner", f"/dashboard/orders/{order.pk}/")

    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    # The double click that matters lands while the first answer is still on its way. On a
    # local server timing would decide it (Chromium folds two quick submits into one request;
    # a slow second press lands on the next page), so the test holds the first answer back:
    # the server has handled the first submit, the browser has not yet seen its reply.
    held: list[Route] = []
    page.route("**/transition/", lambda route: hold_first_answer(route, held))
    box = page.get_by_role("button", name="Accept").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(x, y)
    # route handlers run while the page waits, so each poll waits on the page
    wait_until(lambda: held or page.wait_for_timeout(20), what="the first submit handled")
    page.mouse.click(x, y)  # the second press: same page, same button, same form

    page.locator("#order-status", has_text="ACCEPTED").wait_for()
    page.wait_for_load_state("load")
    log = page.locator("#transition-log .log-entry")
    assert log.filter(has_text="ACCEPTED").count() == 1
    assert log.count() == 4  # CREATED, PAYING, PAID, ACCEPTED
    assert page.get_by_role("button", name="Start preparing").is_visible()
    assert OrderTransition.all_tenants.filter(order=order, to_status=S.ACCEPTED).count() == 1
    screenshot(page, "order-after-double-click.png")

    drain_audits()  # live_server runs in this process; audits wait in its queue
    hits = DuplicateAudit.objects.filter(
        outcome="HIT", resource_ref=f"/dashboard/orders/{order.pk}/"
    )
    assert len(posts) == 2 and posts[0] == posts[1]  # both clicks submitted the form
    assert hits.count() == 1  # the second submit reached the server and was replayed

    page.context.clear_cookies()
    page.goto(f"{live_server.url}/admin/login/?next=/admin/idempotency/duplicateaudit/")
    page.fill("#id_username", "staff")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/admin/idempotency/duplicateaudit/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    row = rows.first.inner_text()
    assert "Replayed" in row and f"/dashboard/orders/{order.pk}/" in row
    assert hits.get().key[:13] in row  # the list shows the start of the key's hash
    screenshot(page, "admin-duplicate-audits.png")


HOURLY_FIRSTS = [2, 1, 0, 0, 0, 1, 3, 6, 9, 14, 18, 12, 7, 5, 4, 6, 11, 17, 21, 16, 10, 6, 3, 5]
HOURLY_HITS = [0, 0, 0, 0, 0, 0, 1, 1, 2, 4, 6, 3, 1, 1, 0, 1, 3, 5, 7, 4, 2, 1, 0, 0]


def seed_history(tenant: Tenant) -> None:
    """A day of traffic, for the chart: lunch and dinner peaks, with their duplicates, written
    as the engine reports them (audit rows and hourly counts)."""
    now = timezone.now()
    top = now.replace(minute=0, second=0, microsecond=0)
    events = []
    for i, (firsts, hits) in enumerate(zip(HOURLY_FIRSTS, HOURLY_HITS, strict=True)):
        hour = top - timedelta(hours=23 - i) + timedelta(minutes=7)
        if hour > now:
            hour = now
        events += [history(tenant, "MISS", f"history-{i}-{n}", hour) for n in range(firsts)]
        events += [
            history(tenant, "HIT", f"history-{i}-{n}", hour + timedelta(seconds=3))
            for n in range(hits)
        ]
    save_events(events)


def history(tenant: Tenant, outcome: str, key: str, at: datetime) -> AuditEvent:
    return AuditEvent(
        tenant_key=str(tenant.pk),
        endpoint="POST api/v1/orders/",
        key=key,
        outcome=outcome,
        source="redis",
        principal="client:1/diner:-",
        at=at,
    )


def test_idempotency_page_draws_the_hit_rate_and_lists_duplicates(page, live_server):
    shop = open_shop()
    seed_history(shop.tenant)
    api_key = diner_token(shop.tenant, "diner-42")
    margherita = [{"dish_id": shop.dishes["Margherita"].pk, "quantity": 1}]
    first = place_via_api(live_server.url, "retry-after-timeout", margherita, api_key)
    replay = place_via_api(live_server.url, "retry-after-timeout", margherita, api_key)
    changed = [{"dish_id": shop.dishes["Margherita"].pk, "quantity": 3}]
    reused = place_via_api(live_server.url, "retry-after-timeout", changed, api_key)
    assert (first.status_code, replay.status_code, reused.status_code) == (201, 201, 422)
    assert replay.headers["X-Idempotent-Result"] == "HIT"
    drain_audits()

    log_in(page, live_server.url, "roma-owner", "/dashboard/idempotency/")

    assert page.locator("svg rect.bar-hit").count() >= 15
    hits = page.locator("#duplicate-hits tbody tr")
    assert hits.first.get_by_role("link", name="Order ").count() == 1  # links the order page
    problem = page.locator("#problems tbody tr").first.inner_text()
    assert "Refused: same request key, different contents" in problem and "items" in problem
    screenshot(page, "idempotency-live.png")


@pytest.mark.parametrize(
    ("path", "fields", "button"),
    [
        ("/dashboard/api-keys/", {"#id_name": "till"}, "Create key"),
        ("/dashboard/menu/", {"#id_name": "Focaccia", "#id_price": "4.00"}, "Add dish"),
        ("/dashboard/coupons/", {"#id_code": "WELCOME5", "#id_value": "5.00"}, "Create coupon"),
        ("/dashboard/members/", {"#id_username": "newcomer"}, "Add member"),
    ],
)
def test_back_after_a_create_brings_an_empty_form_not_the_one_just_sent(
    page, live_server, path, fields, button
):
    """The dashboard's pages are ``no-store``, so "back" fetches the form's page anew, with a
    new one-time token: submitted again, it would be a new action. Chromium used to restore
    the typed values into it, so one more click made a second key named alike; a create form
    comes back empty instead (red without ``autocomplete="off"``)."""
    open_shop()
    User.objects.create_user("newcomer", password=PASSWORD)  # whom the members' form adds
    log_in(page, live_server.url, "roma-owner", path)
    for selector, value in fields.items():
        page.fill(selector, value)
    sent_token = page.locator("form.stacked input[name=idempotency_key]").input_value()
    with page.expect_navigation():
        page.get_by_role("button", name=button).click()
    assert page.locator(".errorlist").count() == 0  # it was applied
    page.go_back()
    page.wait_for_load_state("load")
    assert page.locator("form.stacked input[name=idempotency_key]").input_value() != sent_token
    for selector in fields:
        assert page.locator(selector).input_value() == ""


def test_back_to_a_dish_page_shows_the_stock_as_it_is_now_and_a_price_save_keeps_it(
    page, live_server
):
    """The owner sets Tiramisu's stock to 7, an order takes 2 portions, the owner goes back to
    the dish's page and saves a new price only. "Back" fetches the page anew (``no-store``),
    with the stock as it is now, 5, as the value the stock was seen at; Chromium used to
    restore the 7 typed before into the stock field, so the page showed a stock that was no
    more and the price save wrote it back: 7 again, the 2 portions sold twice (red without
    ``autocomplete="off"``)."""
    shop = open_shop()
    dish = shop.dishes["Tiramisu"]
    url = f"/dashboard/menu/{dish.pk}/"
    log_in(page, live_server.url, "roma-owner", url)
    page.fill("#id_stock", "7")
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    assert "Saved Tiramisu." in page.locator(".messages").inner_text()
    make_order(shop.tenant, dish, quantity=2)  # a diner's order, while the owner looks away
    assert Dish.all_tenants.get(pk=dish.pk).stock == 5

    page.go_back()
    page.wait_for_url(f"{live_server.url}{url}")
    page.wait_for_load_state("load")

    assert page.locator("#id_stock").input_value() == "5"
    page.fill("#id_price", "6.00")
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    assert Dish.all_tenants.values_list("price", "stock").get(pk=dish.pk) == (Decimal("6.00"), 5)


def test_back_to_the_members_page_shows_each_role_as_it_is_not_one_picked_and_left(
    page, live_server
):
    """The owner picks "Manager" for a cook in the members' table, changes their mind and
    opens the board without pressing Change, then goes back. The table's role column is the
    role picker itself: it must show the cook's role, staff (red without ``autocomplete="off"``:
    Chromium restored "Manager" into it, and the page said the cook was a manager, with the
    manager's rights, when they were not)."""
    shop = open_shop()
    cook = User.objects.create_user("cook", password=PASSWORD)
    Membership.objects.create(user=cook, tenant=shop.tenant, role=Membership.Role.STAFF)
    log_in(page, live_server.url, "roma-owner", "/dashboard/members/")
    picker = page.get_by_label("Role of cook")
    picker.select_option(Membership.Role.MANAGER)

    page.get_by_role("link", name="Orders", exact=True).click()
    page.wait_for_url(f"{live_server.url}/dashboard/")
    page.go_back()
    page.wait_for_url(f"{live_server.url}/dashboard/members/")
    page.wait_for_load_state("load")

    assert picker.input_value() == Membership.Role.STAFF
    assert Membership.objects.get(user=cook).role == Membership.Role.STAFF


def test_back_to_a_page_names_its_restaurant_not_one_picked_and_left_in_the_switcher(
    page, live_server
):
    """A user of two restaurants, working in Roma, picks Kyoto in the top bar's switcher,
    changes their mind and opens the coupons without pressing Switch, then goes back. The
    switcher is where the page names its restaurant: it must say Roma, whose menu the page
    shows (red without ``autocomplete="off"``: Chromium restored Kyoto into it, over Roma's
    dishes)."""
    shop = open_shop()
    kyoto = Tenant.objects.create(slug="sushi-kyoto", name="Sushi Kyoto")
    Membership.objects.create(user=shop.owner, tenant=kyoto, role=Membership.Role.OWNER)
    log_in(page, live_server.url, "roma-owner")
    switcher = page.locator("#tenant-switch")
    if switcher.input_value() != str(shop.tenant.pk):
        switcher.select_option(str(shop.tenant.pk))
        with page.expect_navigation():
            page.get_by_role("button", name="Switch").click()
    page.goto(f"{live_server.url}/dashboard/menu/")
    switcher.select_option(str(kyoto.pk))

    page.get_by_role("link", name="Coupons").click()
    page.wait_for_url(f"{live_server.url}/dashboard/coupons/")
    page.go_back()
    page.wait_for_url(f"{live_server.url}/dashboard/menu/")
    page.wait_for_load_state("load")

    assert page.locator('tr:has-text("Margherita")').count() == 1  # Roma's menu
    assert switcher.input_value() == str(shop.tenant.pk)


def test_a_member_given_a_password_by_staff_chooses_their_own_before_the_board(page, live_server):
    """In Chromium: signed in with the password staff gave, the member lands on the page to
    choose their own (the board asked for is kept as the next page), a too-short or unchanged
    choice is the form's error, and the chosen one leads to the board."""
    shop = open_shop()
    PasswordToReplace.objects.create(user=shop.owner)  # as staff's "Add user" leaves it

    page.goto(f"{live_server.url}/dashboard/?status=new")
    page.fill("#id_username", "roma-owner")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/dashboard/password/?next=*")
    assert page.get_by_role("status").inner_text().startswith("Your password was set by")

    page.fill("#id_old_password", PASSWORD)
    page.fill("#id_new_password1", PASSWORD)
    page.fill("#id_new_password2", PASSWORD)
    page.get_by_role("button", name="Change password").click()
    assert page.get_by_text("Choose a password other than your current one.").is_visible()

    page.fill("#id_old_password", PASSWORD)
    page.fill("#id_new_password1", "a-pass-of-my-own-8842")
    page.fill("#id_new_password2", "a-pass-of-my-own-8842")
    page.get_by_role("button", name="Change password").click()
    page.wait_for_url(f"{live_server.url}/dashboard/?status=new")
    assert page.get_by_text("Your password is changed.").is_visible()
    screenshot(page, "password-chosen.png")
    assert not PasswordToReplace.objects.filter(user=shop.owner).exists()
