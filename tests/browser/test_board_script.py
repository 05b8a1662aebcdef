"""The board's script in a real browser: while nothing changes its polls are answered 304 and
the cards stay as they are, their ages moving on; the ages it writes are the server's words,
counted on the server's clock even when the tablet's own clock is wrong."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ordering.models import Order, OrderStatus
from ordering.services.lifecycle import transition_order
from ordering.templatetags.order_age import age_label
from tests.browser.test_dashboard import log_in, open_shop
from tests.dashboard.factories import make_order

pytestmark = [pytest.mark.browser, pytest.mark.slow]
S = OrderStatus


def placed_ago(order: Order, seconds: float) -> None:
    Order.all_tenants.filter(pk=order.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


def card_age(page, order: Order) -> str:
    return page.locator(f'[data-order-id="{order.pk}"] time').inner_text()


def fragment_answers(page) -> list[int]:
    """The statuses of the board's polls, as they arrive (while Playwright is called)."""
    statuses: list[int] = []
    page.on(
        "response",
        lambda response: "/board/fragment/" in response.url and statuses.append(response.status),
    )
    return statuses


def next_poll(page) -> int:
    """The status of the board's next poll, waited for."""
    with page.expect_response(lambda r: "/board/fragment/" in r.url, timeout=30_000) as answer:
        pass
    return answer.value.status


def test_an_unchanged_board_is_kept_and_only_its_ages_move_on(page, live_server):
    shop = open_shop()
    order = make_order(shop.tenant, shop.dishes["Margherita"], S.PAID)
    placed_ago(order, 52)
    answers = fragment_answers(page)

    log_in(page, live_server.url, "roma-owner")
    assert card_age(page, order) == "just now"
    page.locator(f'[data-order-id="{order.pk}"]').evaluate("card => { card.kept = true; }")

    # the minute passes on the server's clock, with no change on the board
    expect(page.locator(f'[data-order-id="{order.pk}"] time')).to_have_text(
        "1 min ago", timeout=30_000
    )
    assert answers and set(answers) == {304}
    assert page.locator(f'[data-order-id="{order.pk}"]').evaluate("card => card.kept") is True

    # a new order: the next poll brings the columns again, and the tag that goes with them
    new = make_order(shop.tenant, shop.dishes["Tiramisu"], S.PAID)
    page.locator(f'[data-order-id="{new.pk}"]').wait_for(state="visible", timeout=15_000)
    assert 200 in answers
    assert [next_poll(page), next_poll(page)] == [304, 304]


AGES = [5 * 60 + 20, 2 * 3600 + 5 * 60 + 20, 27 * 3600 + 20, 3 * 86400 + 20]


def test_the_script_writes_the_server_s_words_on_the_server_s_clock(page, live_server):
    shop = open_shop()
    orders = [make_order(shop.tenant, shop.dishes["Carbonara"], S.PAID) for _ in AGES]
    for order, seconds in zip(orders, AGES, strict=True):
        placed_ago(order, seconds)
    # the tablet's clock is three hours fast, and stands still
    page.clock.set_fixed_time(timezone.now() + timedelta(hours=3))

    log_in(page, live_server.url, "roma-owner")
    server_words = [card_age(page, order) for order in orders]
    # the script writes the ages, then says when it last looked
    expect(page.locator("#board-updated")).to_contain_text("Updated", timeout=30_000)

    assert server_words == [age_label(seconds) for seconds in AGES]
    assert [card_age(page, order) for order in orders] == server_words
    assert server_words == ["5 min ago", "2 h 5 min ago", "1 d 3 h ago", "3 d ago"]


def focused(page) -> str:
    """What has the keyboard's focus: the order id of the card whose link it is, else the tag."""
    return page.evaluate(
        "() => { const el = document.activeElement;"
        " const card = el && el.closest('[data-order-id]');"
        " return card ? card.dataset.orderId : el.tagName; }"
    )


def test_a_card_keeps_the_keyboard_s_focus_when_the_board_refreshes(page, live_server):
    """A person at the keyboard tabs to an order's card; a new order arrives and the board
    swaps in its columns. The focus stays on that card, in the column it is in now, so Enter
    still opens it and Tab goes on from it (red: the focus fell back to the page's body)."""
    shop = open_shop()
    order = make_order(shop.tenant, shop.dishes["Margherita"], S.PAID)
    log_in(page, live_server.url, "roma-owner")
    page.locator(f'[data-order-id="{order.pk}"] a.card-link').focus()
    assert focused(page) == str(order.pk)

    # another order arrives, and this one is accepted elsewhere: the next poll swaps columns
    new = make_order(shop.tenant, shop.dishes["Tiramisu"], S.PAID)
    transition_order(tenant=shop.tenant, order_id=order.pk, target=S.ACCEPTED, actor="test")
    page.locator(f'[data-order-id="{new.pk}"]').wait_for(state="visible", timeout=30_000)
    expect(page.locator(f'.status-accepted [data-order-id="{order.pk}"]')).to_be_visible()

    assert focused(page) == str(order.pk)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == f"{live_server.url}/dashboard/orders/{order.pk}/"
