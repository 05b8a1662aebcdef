"""The owner's privacy page in a real browser: a double click on "Erase diner"."""

from __future__ import annotations

import pytest
from playwright.sync_api import Route

from ordering.models import DinerErasure, Order
from tests.browser.test_dashboard import log_in, open_shop
from tests.dashboard.factories import make_order
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def erasure_of_diner_1_filled_in(page, live_server, settings) -> None:
    """The owner on the privacy page, diner-1 (who has one order) typed in and confirmed."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    shop = open_shop()
    make_order(shop.tenant, shop.dishes["Margherita"])  # diner-1's
    log_in(page, live_server.url, "roma-owner", "/dashboard/privacy/")
    page.fill("#id_diner_id", "diner-1")
    page.check("#id_confirm")


def test_a_double_click_on_erase_says_the_diner_was_erased_not_that_there_was_none(
    page, live_server, settings
):
    """The first press erases; the second (sent while the first answer is on its way, so the
    page shown is the second's) finds nothing left. The owner must read that the diner is
    erased, with the orders' pseudonym, not "erased already, or never a diner of this
    restaurant", which leaves them unsure whether they mistyped the id."""
    erasure_of_diner_1_filled_in(page, live_server, settings)

    held: list[Route] = []

    def hold_the_first_answer(route: Route) -> None:
        if route.request.method != "POST" or held:
            route.continue_()
            return
        route.fetch()  # the server erases; its answer never reaches the page
        held.append(route)

    page.route("**/dashboard/privacy/", hold_the_first_answer)
    box = page.get_by_role("button", name="Erase diner").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(x, y)
    wait_until(lambda: held or page.wait_for_timeout(20), what="the first press handled")
    page.mouse.click(x, y)  # the second press: same page, same form
    page.locator(".messages").wait_for()
    page.wait_for_load_state("load")

    [pseudonym] = set(Order.all_tenants.values_list("diner_id", flat=True))
    assert pseudonym.startswith("erased-")
    assert DinerErasure.objects.count() == 2  # the second logged as a row of zeros (documented)
    said = page.locator(".messages").inner_text()
    assert f"This diner is erased: 1 order(s) show {pseudonym}" in said
    assert "never a diner" not in said


def test_back_after_an_erasure_brings_the_form_empty_not_the_erased_diner_s_id(
    page, live_server, settings
):
    """The page keeps no erased diner's id (its log names each by pseudonym only); "back"
    after an erasure must not show it either, typed into the form and ticked for erasing
    again, to whoever uses the restaurant's tablet next (red without ``autocomplete="off"``:
    Chromium restored both)."""
    erasure_of_diner_1_filled_in(page, live_server, settings)
    with page.expect_navigation():
        page.get_by_role("button", name="Erase diner").click()
    assert "Diner erased" in page.locator(".messages").inner_text()

    page.go_back()
    page.wait_for_load_state("load")

    assert page.locator("#id_diner_id").input_value() == ""
    assert not page.locator("#id_confirm").is_checked()
    assert "diner-1" not in page.content()
