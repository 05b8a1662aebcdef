"""The board's poll: answered 304 while no card has changed, the columns again when one has.

A stale board is a missed order, so every change a card shows must change the tag: a new order,
a move, an order gone, the newest-orders window moving on, the tenant's time zone. Another
tenant's orders must not.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ordering import prefetch
from ordering.dashboard.orders import BOARD_COLUMNS
from ordering.models import Order, OrderStatus, Payment
from ordering.selectors import board_cards, board_version
from ordering.services.lifecycle import cancel_order, transition_order
from ordering.services.placing import ItemRequest, place_order
from ordering.templatetags.order_age import age_label
from tests.dashboard.conftest import World, make_order
from tests.support.compiles import compiled_models

S = OrderStatus
FRAGMENT = "/dashboard/board/fragment/"


def poll(client: Client, tag: str | None = None):
    return client.get(FRAGMENT, **({"HTTP_IF_NONE_MATCH": tag} if tag else {}))


def test_an_unchanged_board_is_answered_304_by_reading_the_cards_columns_alone(merchant, mine):
    page = merchant.get("/dashboard/")
    first = poll(merchant)
    assert first.status_code == 200 and first["ETag"].startswith('"')
    shown = re.search(r'data-version="([^"]+)"', page.content.decode())
    assert shown and html.unescape(shown.group(1)) == first["ETag"]  # its first poll: a 304

    with CaptureQueriesContext(connection) as queries:
        again = poll(merchant, first["ETag"])
    assert again.status_code == 304 and again.content == b""
    assert "no-store" in again["Cache-Control"]
    orders_read = [q["sql"] for q in queries if "ordering_" in q["sql"]]
    # the newest orders' and the open ones' (test_newer_orders_never_push_a_paid_order_off...)
    assert len(orders_read) == 2
    assert not any("ordering_orderline" in sql for sql in orders_read)


def test_the_tag_weakened_by_a_compressing_proxy_still_matches(merchant, mine):
    """A proxy that compresses the answer marks its tag weak (``W/"…"``); the script then
    sends that form, which must still be answered 304."""
    tag = poll(merchant)["ETag"]
    assert poll(merchant, f"W/{tag}").status_code == 304
    assert poll(merchant, 'W/"another"').status_code == 200


def test_the_cards_write_ids_and_totals_as_the_api_does_whatever_the_number_format(
    merchant, mine, settings
):
    """A 64-bit id with a thousands separator would be another id to the page's links and
    scripts; the columns are written unlocalized, as the API writes them."""
    settings.USE_THOUSAND_SEPARATOR = True
    settings.NUMBER_GROUPING = 3
    Order.all_tenants.filter(pk=mine.order.pk).update(total=Decimal("1234.50"))
    columns = poll(merchant).content.decode()
    assert f'data-order-id="{mine.order.pk}"' in columns
    assert "1234.50 EUR" in columns


def place(world: World) -> None:
    make_order(world.tenant, world.dishes["pasta"], S.CREATED)


def move(world: World) -> None:
    transition_order(tenant=world.tenant, order_id=world.order.pk, target=S.ACCEPTED, actor="t")


def status_written_alone(world: World) -> None:
    """A write that leaves ``updated_at`` as it was still changes the card's column."""
    Order.all_tenants.filter(pk=world.order.pk).update(status=S.ACCEPTED)


def remove(world: World) -> None:
    """An unpaid order deleted (a paid one keeps its payment, which protects it)."""
    Order.all_tenants.filter(tenant=world.tenant, status=S.CREATED).delete()


def move_to_another_time_zone(world: World) -> None:
    world.tenant.time_zone = "Pacific/Auckland"
    world.tenant.save(update_fields=["time_zone"])


CHANGES: dict[str, Callable[[World], None]] = {
    "a new order": place,
    "a move": move,
    "a status written alone": status_written_alone,
    "an order gone": remove,
    "the tenant's time zone": move_to_another_time_zone,
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_change_on_the_board_is_answered_with_the_new_columns(merchant, mine, change):
    make_order(mine.tenant, mine.dishes["pasta"], S.CREATED)
    tag = poll(merchant)["ETag"]
    assert poll(merchant, tag).status_code == 304

    change(mine)

    fresh = poll(merchant, tag)
    assert fresh.status_code == 200 and fresh["ETag"] != tag
    assert poll(merchant, fresh["ETag"]).status_code == 304


def test_the_version_covers_the_newest_orders_only(mine):
    """An unpaid or finished order older than the board's newest ``limit`` is not on it: its
    moves leave the version; a new order, which pushes the oldest shown one off, changes it."""
    old = make_order(mine.tenant, mine.dishes["pasta"], S.CREATED)
    for _ in range(2):
        make_order(mine.tenant, mine.dishes["pasta"], S.CREATED)
    window_of_two = board_version(tenant=mine.tenant, limit=2)

    cancel_order(tenant=mine.tenant, order_id=old.pk, actor="t")  # third newest of four
    assert board_version(tenant=mine.tenant, limit=2) == window_of_two

    make_order(mine.tenant, mine.dishes["pasta"], S.CREATED)
    assert board_version(tenant=mine.tenant, limit=2) != window_of_two


def test_newer_orders_never_push_a_paid_order_off_the_board(mine):
    """Anyone holding the app's public key can place and cancel orders, hundreds a minute:
    an order the kitchen still has to act on (paid, not finished) stays on the board, and
    its moves on the version, however many orders came after it."""
    for _ in range(3):
        make_order(mine.tenant, mine.dishes["pasta"], S.CANCELLED)
    # red: only the three newest, cancelled ones (mine.order, PAID, the oldest, was gone)
    cards = board_cards(tenant=mine.tenant, limit=2)
    assert [card.status for card in cards] == [S.CANCELLED, S.CANCELLED, S.PAID]
    assert cards[-1].pk == mine.order.pk
    version = board_version(tenant=mine.tenant, limit=2)

    move(mine)
    assert board_version(tenant=mine.tenant, limit=2) != version


def test_a_new_deploy_of_the_columns_template_changes_the_tag(merchant, mine, settings):
    tag = poll(merchant)["ETag"]
    source = (Path(settings.BASE_DIR) / "templates" / BOARD_COLUMNS).read_text()
    settings.TEMPLATES = [
        {
            **settings.TEMPLATES[0],
            "APP_DIRS": False,
            "OPTIONS": {
                **settings.TEMPLATES[0]["OPTIONS"],
                "loaders": [
                    ("django.template.loaders.locmem.Loader", {BOARD_COLUMNS: source + "\n"}),
                    "django.template.loaders.filesystem.Loader",
                    "django.template.loaders.app_directories.Loader",
                ],
            },
        }
    ]
    assert poll(merchant, tag).status_code == 200


def test_another_tenant_s_orders_leave_the_board_unchanged(merchant, mine, theirs):
    tag = poll(merchant)["ETag"]
    place(theirs)
    move(theirs)
    assert poll(merchant, tag).status_code == 304


def test_two_tenants_boards_never_share_a_tag(mine, theirs):
    their_merchant = Client()
    their_merchant.force_login(theirs.user)
    Payment.all_tenants.all().delete()
    Order.all_tenants.all().delete()  # two empty boards: the same cards, none
    mine_client = Client()
    mine_client.force_login(mine.user)
    assert poll(mine_client)["ETag"] != poll(their_merchant)["ETag"]
    assert poll(their_merchant, poll(mine_client)["ETag"]).status_code == 200


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (-5, "just now"),
        (59.9, "just now"),
        (60, "1 min ago"),
        (59 * 60 + 59, "59 min ago"),
        (3600, "1 h ago"),
        (2 * 3600 + 5 * 60 + 30, "2 h 5 min ago"),
        (24 * 3600 - 1, "23 h 59 min ago"),
        (24 * 3600, "1 d ago"),
        (3 * 86400 + 7200 + 600, "3 d 2 h ago"),
    ],
)
def test_an_order_s_age_in_words(seconds, words):
    assert age_label(seconds) == words


def test_the_version_s_read_is_compiled_once_per_process(mine, theirs, monkeypatch):
    monkeypatch.setattr(prefetch, "_VALUES_READS", {})
    with compiled_models() as compiled:
        versions = [board_version(tenant=w.tenant) for w in (mine, theirs, mine)]
    assert compiled.count(Order) == 2  # each of the two windows, once
    assert versions[0] == versions[2] != versions[1]


def test_the_cards_are_the_newest_orders_read_as_plain_values_in_three_statements(mine, theirs):
    d = mine.dishes
    mixed = place_order(
        tenant=mine.tenant,
        items=[ItemRequest(dish_id=d["pasta"].pk, quantity=2), ItemRequest(d["pizza"].pk, 1)],
        payment_method="card",
        actor="test",
    )
    make_order(theirs.tenant, theirs.dishes["pasta"], S.CREATED)

    with CaptureQueriesContext(connection) as queries:
        cards = board_cards(tenant=mine.tenant)
    assert len(queries) == 3  # the newest orders, the open ones, their lines
    assert [card.pk for card in cards] == [mixed.pk, mine.order.pk]  # newest first, mine only
    for card in cards:
        order = Order.all_tenants.get(pk=card.pk)
        shown = (card.number_label, card.status, card.total, card.currency, card.created_at)
        assert shown == (
            order.number_label,
            order.status,
            order.total,
            order.currency,
            order.created_at,
        )
        assert card.lines == [(line.quantity, line.dish_name) for line in order.lines.all()]
    assert [line.quantity for line in cards[0].lines] == [2, 1]


def test_a_poll_reads_only_the_restaurant_s_own_newest_and_open_orders(merchant, mine, theirs):
    # red: each window was read by walking the index of every restaurant's orders by creation,
    # newest first, and dropping the rows of other restaurants or not open: a restaurant with
    # no open order (or only old ones) had every order of the platform read at each poll of
    # each open board (300,000 orders read for none, 0.19 s, every few seconds)
    first = poll(merchant)

    with CaptureQueriesContext(connection) as queries:
        assert poll(merchant, first["ETag"]).status_code == 304
    windows = [q["sql"] for q in queries if "ordering_order" in q["sql"]]
    assert len(windows) == 2
    with connection.cursor() as cursor:
        # a few rows: judge the plan's shape, as over millions of orders (an index that holds
        # the restaurant's rows in the window's order: nothing read past the window, no sort)
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            cursor.execute(f"SET LOCAL {setting} = off")
        for sql in windows:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Filter" not in plan and "Sort" not in plan, plan
