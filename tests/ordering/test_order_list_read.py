"""The order list's read: pages by cursor, each what the ORM reads, in two statements
compiled once.

``GET /api/v1/orders/`` answers a page at a time from a place in the list
(``ordering.order_list.read_page``: the page's orders with their coupons, then their lines and
payments). These tests hold every page, filter and caller to what the ORM's queryset with its
prefetch gives, newest first; the pages to stay as they were while orders are placed or move
between two reads; a malformed cursor to a 400, and a well-formed one made by hand to a
place in the caller's own list.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ordering import order_list
from ordering.api.rendering import render_order
from ordering.models import Order, OrderStatus, Payment
from ordering.order_cursor import Cursor
from ordering.selectors import orders_of
from ordering.services.lifecycle import cancel_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import ApiClient
from tests.conftest import api_for, menu_for
from tests.support.compiles import compiled_models
from tests.support.paying_flips import STATES, paying_flips

pytestmark = pytest.mark.django_db

PAGE = 20
DINER = "diner-1"


def place(tenant, menu, n: int, diner: str | None) -> Order:
    items = [ItemRequest(menu["pizza"].pk, 1 + n % 3)]
    if n % 4 == 1:
        items.append(ItemRequest(menu["pasta"].pk, 2))
    return place_order(
        tenant=tenant, items=items, payment_method="card", diner_id=diner, actor="test"
    )


@pytest.fixture
def orders(tenant, other_tenant):
    """45 orders of the diner (every third one paid), 5 of another diner, 3 of another
    tenant's diner of the same name; one of the diner's orders has a second, later payment."""
    menu, theirs = menu_for(tenant, stock=10_000), menu_for(other_tenant, stock=100)
    mine = []
    for n in range(45):
        order = place(tenant, menu, n, DINER)
        if n % 3 == 0:
            pay_order(tenant=tenant, order_id=order.pk, actor="test")
        mine.append(order)
    for n in range(5):
        place(tenant, menu, n, "diner-2")
    for n in range(3):
        place(other_tenant, theirs, n, DINER)
    Payment.all_tenants.create(
        tenant=tenant,
        order=mine[3],
        provider="mock",
        provider_txn_id="second",
        method="card",
        amount=Decimal("1.00"),
    )
    Payment.all_tenants.filter(provider_txn_id="second").update(
        created_at=timezone.now() + timedelta(minutes=5)
    )
    return mine


def by_the_orm(tenant, *, diner: str | None, status: str | None, internal: bool):
    """The pages the list shows: the ORM's queryset with its prefetch, newest first, cut in
    pages of 20."""
    rows = orders_of(tenant=tenant, diner_id=diner)
    if status is not None:
        rows = rows.filter(status=status)
    rows = rows.order_by("-created_at", "-id").select_related("coupon")
    shown = [
        render_order(o, internal=internal, detail=False)
        for o in rows.prefetch_related("lines", "payments")
    ]
    return [shown[i : i + PAGE] for i in range(0, len(shown), PAGE)] or [[]]


def caller_of(tenant, diner: str | None):
    return api_for(tenant, diner=diner) if diner else api_for(tenant, kind=ApiClient.Kind.MERCHANT)


def pages_after(caller, url: str) -> list[dict]:
    """Each answer from ``url`` on, following ``next`` until there is none."""
    answers = []
    while url:
        answer = caller.get(url)
        assert answer.status_code == 200, answer.content
        answers.append(answer.json())
        url = answer.json()["next"]
    return answers


def cursor_of(link: str) -> Cursor:
    [value] = parse_qs(urlsplit(link).query)["cursor"]
    return Cursor.decode(value)


CALLERS = [pytest.param(DINER, id="diner"), pytest.param(None, id="merchant")]


@pytest.mark.parametrize("diner", CALLERS)
@pytest.mark.parametrize("status", [None, OrderStatus.PAYING])
def test_every_page_is_what_the_orm_reads_forwards_and_back(tenant, orders, diner, status):
    caller = caller_of(tenant, diner)
    expected = by_the_orm(tenant, diner=diner, status=status, internal=not diner)
    assert expected[0]
    # following next from the newest orders
    first = "/api/v1/orders/" + (f"?status={status}" if status else "")
    forwards = pages_after(caller, first)
    assert [page["results"] for page in forwards] == expected
    # every page counts the whole list, as the page-number answer did
    assert {page["count"] for page in forwards} == {sum(map(len, expected))}
    assert forwards[0]["previous"] is None
    assert all(page["previous"] for page in forwards[1:])
    # each link keeps the filter
    for page in forwards:
        for link in (page["next"], page["previous"]):
            if link:
                assert parse_qs(urlsplit(link).query).get("status") == (
                    [status] if status else None
                )
    # and back from the last page, following previous
    backwards, url = [], forwards[-1]["previous"]
    while url:
        page = caller.get(url).json()
        backwards.append(page["results"])
        url = page["previous"]
    assert backwards[::-1] == expected[:-1]


def test_the_latest_payment_is_shown(tenant, orders):
    listed = [
        o
        for page in pages_after(api_for(tenant, diner=DINER), "/api/v1/orders/")
        for o in page["results"]
    ]
    shown = {o["id"]: o["payment"] for o in listed}
    assert shown[str(orders[3].pk)]["amount"] == "1.00"


@pytest.mark.parametrize("start", ["newest", "after", "before"])
def test_a_page_is_three_statements_compiled_once_per_process(tenant, orders, start):
    caller = api_for(tenant, diner=DINER)
    first = caller.get("/api/v1/orders/").json()
    second = caller.get(first["next"]).json()
    url = {"newest": "/api/v1/orders/", "after": first["next"], "before": second["previous"]}[start]
    assert caller.get(url).status_code == 200  # compiles this shape
    with compiled_models() as compiled, CaptureQueriesContext(connection) as queries:
        answer = caller.get(url)
    assert answer.status_code == 200 and len(answer.json()["results"]) == PAGE
    assert compiled == []
    reads = [q["sql"] for q in queries if "ordering_" in q["sql"]]
    assert len(reads) == 3
    # a keyset read: no rows skipped by an offset; the list's count is read on its own
    assert "LIMIT" in reads[0] and "COUNT" not in reads[0] and "OFFSET" not in reads[0]
    assert "ordering_orderline" in reads[1] and "ordering_payment" in reads[1]
    assert reads[2].startswith("SELECT COUNT(*)") and reads[2].endswith("LIMIT 10000) AS listed")


@pytest.mark.parametrize("change", ["placed", "left", "both"])
def test_pages_stay_as_they_were_while_orders_are_placed_and_move(tenant, orders, change):
    # given the diner's first page of orders waiting to be paid (CREATED), newest first
    caller = api_for(tenant, diner=DINER)
    waiting = orders_of(tenant=tenant, diner_id=DINER).filter(status=OrderStatus.CREATED)
    created = [
        str(pk) for pk in waiting.order_by("-created_at", "-id").values_list("pk", flat=True)
    ]
    first = caller.get("/api/v1/orders/?status=CREATED").json()
    assert [o["id"] for o in first["results"]] == created[:PAGE]
    # when, before the next page is read, 3 orders are placed, or 3 of the first page leave
    # the filter (cancelled), or both
    if change in ("placed", "both"):
        menu = {"pizza": orders[0].lines.get().dish}
        for n in range(3):
            place(tenant, menu, 3 * n, DINER)  # one pizza line each
    if change in ("left", "both"):
        for shown in first["results"][:3]:
            cancel_order(tenant=tenant, order_id=int(shown["id"]), actor="test")
    # then the next pages hold every older order once: none of the first page again, none
    # skipped (page numbers showed 3 of the first page again after 3 were placed, and
    # skipped 3 once 3 had left the list)
    rest = [o["id"] for page in pages_after(caller, first["next"]) for o in page["results"]]
    assert rest == created[PAGE:]


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "abc",
        "%%%",
        "x" * 57,
        "YS4xLjA",  # a.1.0: no order id 0
        "Yy4xLjE",  # c.1.1: no such direction
        "YS4tMS4x",  # a.-1.1
        "YS45OTk5OTk5OTk5OTk5OTk5OTk5LjE",  # a time past the calendar's end
        "YS4xLjk5OTk5OTk5OTk5OTk5OTk5OTk",  # an id past 64 bits
        "8J-Ygg",  # not ASCII text
    ],
)
def test_a_cursor_the_list_did_not_give_is_400(tenant, orders, cursor):
    answer = api_for(tenant, diner=DINER).get("/api/v1/orders/", {"cursor": cursor})
    assert answer.status_code == 400
    assert answer.json()["code"] == "CURSOR_INVALID"


@pytest.mark.parametrize(
    "query", ["page=1", "page=2", "page=last", "page_size=50", "limit=20", "offset=20"]
)
def test_paging_by_number_is_refused_not_read_as_the_first_page(tenant, orders, query):
    """A client paging by number or offset would read the first page again and again, the
    parameter copied into every next link (red for the last three: answered 200)."""
    answer = api_for(tenant, diner=DINER).get(f"/api/v1/orders/?{query}")
    assert answer.status_code == 400
    assert answer.json()["code"] == "VALIDATION_ERROR"
    assert answer.json()["detail"].startswith(query.split("=")[0] + " is not taken")


def test_an_empty_list_is_one_page_of_nothing(tenant):
    body = api_for(tenant, diner=DINER).get("/api/v1/orders/").json()
    assert body == {"count": 0, "next": None, "previous": None, "results": []}


def test_a_place_past_the_end_is_an_empty_page_that_leads_back(tenant, orders):
    # given a cursor after the diner's oldest order
    oldest = orders[0]
    place = Cursor(created_at=oldest.created_at, order_id=oldest.pk)
    answer = api_for(tenant, diner=DINER).get("/api/v1/orders/", {"cursor": place.encode()})
    # then no order follows, and previous leads back to the orders before that place
    body = answer.json()
    assert (body["results"], body["next"]) == ([], None)
    assert cursor_of(body["previous"]) == Cursor(oldest.created_at, oldest.pk, backwards=True)


def test_a_cursor_edited_into_another_place_reads_only_the_caller_s_own_list_from_there(
    tenant, orders
):
    """The cursor is a place, not a permission (docs: README, CURSOR_INVALID): one made by
    hand at another diner's order answers 200 with the caller's own orders older than it."""
    # given a well-formed cursor no answer gave: the place of another diner's order
    theirs = Order.all_tenants.filter(tenant=tenant, diner_id="diner-2").earliest("created_at")
    place = Cursor(created_at=theirs.created_at, order_id=theirs.pk)
    # when the diner reads from it
    answer = api_for(tenant, diner=DINER).get("/api/v1/orders/", {"cursor": place.encode()})
    # then the page is its own orders placed before that one, newest first
    assert answer.status_code == 200, answer.content
    expected = [o.pk for o in orders if (o.created_at, o.pk) < (theirs.created_at, theirs.pk)]
    assert [int(o["id"]) for o in answer.json()["results"]] == expected[::-1][:PAGE]
    assert {o["diner_id"] for o in answer.json()["results"]} == {DINER}


def test_where_statements_do_not_ride_along_the_orm_reads_a_page_with_its_prefetch(
    tenant, orders, monkeypatch
):
    """As on the embedded demo's SQLite: the page with its coupons, the list's count, its
    lines and its payments, four statements whatever the page's size, and the same answer."""
    caller = api_for(tenant, diner=DINER)
    url = caller.get("/api/v1/orders/").json()["next"]
    expected = caller.get(url).json()
    monkeypatch.setattr(order_list, "statements_ride_along", lambda using: False)
    with CaptureQueriesContext(connection) as queries:
        answer = caller.get(url)
    assert answer.json() == expected
    assert len([q for q in queries if "ordering_" in q["sql"]]) == 4


@pytest.mark.django_db(transaction=True)  # as served: the read in no transaction of its own
def test_a_listed_order_and_its_payment_are_from_one_moment(tenant):
    # given a paying order, and a writer that pays it and takes that back again and again,
    # each time the order and its payment in one transaction (as a provider's callback does)
    menu = menu_for(tenant)
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pizza"].pk, 1)],
        payment_method="card",
        diner_id=DINER,
        actor="test",
    )
    payment = pay_order(tenant=tenant, order_id=order.pk, actor="test")[1]
    api = api_for(tenant, diner=DINER)
    # when the diner lists its orders meanwhile, many times
    seen = []
    with paying_flips(order, payment) as flips:
        while len(seen) < 300 or len(flips) < 50:
            [listed] = api.get("/api/v1/orders/").json()["results"]
            seen.append((listed["status"], listed["payment"]["status"]))
    # then every answer shows the order and its payment as one committed moment left them
    assert set(seen) <= set(STATES), set(seen) - set(STATES)


@pytest.mark.parametrize("ride_along", [True, False], ids=["compiled", "orm"])
@pytest.mark.parametrize(
    ("who", "query", "held"),
    [("diner", "", 45), ("merchant", "", 50), ("merchant", "?status=CREATED", 35)],
)
def test_the_count_stops_at_the_limit_and_reads_no_more_rows_than_it(
    tenant, orders, monkeypatch, ride_along, who, query, held
):
    """A restaurant's key listing 200,000 orders counted every one of them on every page (a
    sequential scan of the tenant's rows per request); the count now stops at
    ``COUNT_LIMIT``, the statement itself limited, as the admin's lists count (red before: the
    whole list counted, 45, 50 and 35)."""
    # given a limit under what each list holds
    monkeypatch.setattr(order_list, "COUNT_LIMIT", 30)
    if not ride_along:
        monkeypatch.setattr(order_list, "statements_ride_along", lambda using: False)
    caller = api_for(tenant, diner=DINER) if who == "diner" else api_for(tenant, kind="merchant")
    listed = orders_of(tenant=tenant, diner_id=DINER if who == "diner" else None)
    assert (listed.filter(status="CREATED") if query else listed).count() == held
    # when the list is read
    with CaptureQueriesContext(connection) as queries:
        body = caller.get(f"/api/v1/orders/{query}").json()
    # then its count is the limit, read by a statement that stops there
    assert body["count"] == 30
    [counted] = [q["sql"] for q in queries if "COUNT(" in q["sql"]]
    assert "LIMIT 30" in counted


def test_a_list_under_the_limit_counts_every_order(tenant, orders):
    """The documented limit (README, the order list) is 10,000; a list under it is counted
    whole."""
    assert order_list.COUNT_LIMIT == 10_000
    assert api_for(tenant, diner=DINER).get("/api/v1/orders/").json()["count"] == 45
