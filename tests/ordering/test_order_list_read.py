"""The order list's read: every page what the ORM reads, in two statements compiled once.

``GET /api/v1/orders/`` answers DRF's page-number pagination from ``ordering.order_list
.OrderList`` (the count with the asked page in one query, then the page's lines and payments in
another). These tests hold every page, filter and caller to what the ORM's queryset with its
prefetch gives, paginated by Django, and the read to two statements.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.paginator import Paginator
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ordering import order_list
from ordering.api.rendering import render_order
from ordering.models import Order, OrderStatus, Payment
from ordering.order_list import OrderList
from ordering.selectors import orders_of
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


def by_the_orm(tenant, *, diner: str | None, status: str | None, page: int, internal: bool):
    """What the list showed when it paginated the ORM's queryset with its prefetch."""
    rows = orders_of(tenant=tenant, diner_id=diner)
    if status is not None:
        rows = rows.filter(status=status)
    rows = rows.select_related("coupon").prefetch_related("lines", "payments")
    pages = Paginator(rows, PAGE)
    shown = [render_order(o, internal=internal, detail=False) for o in pages.page(page)]
    return pages.count, pages.num_pages, shown


CALLERS = [pytest.param(DINER, id="diner"), pytest.param(None, id="merchant")]


@pytest.mark.parametrize("diner", CALLERS)
@pytest.mark.parametrize("status", [None, OrderStatus.PAYING])
def test_every_page_is_what_the_orm_reads(tenant, orders, diner, status):
    caller = (
        api_for(tenant, diner=diner) if diner else api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    )
    query = f"&status={status}" if status else ""
    count, last, _ = by_the_orm(tenant, diner=diner, status=status, page=1, internal=not diner)
    assert count > 0
    for number in [*range(1, last + 1), "last"]:
        answer = caller.get(f"/api/v1/orders/?page={number}{query}")
        assert answer.status_code == 200, answer.content
        body = answer.json()
        page = last if number == "last" else number
        expected = by_the_orm(tenant, diner=diner, status=status, page=page, internal=not diner)
        assert (body["count"], body["results"]) == (expected[0], expected[2])
        assert (body["next"] is None) == (page == last)
        assert (body["previous"] is None) == (page == 1)


def test_the_latest_payment_is_shown(tenant, orders):
    listed = api_for(tenant, diner=DINER).get("/api/v1/orders/?page=3").json()["results"]
    shown = {o["id"]: o["payment"] for o in listed}
    assert shown[str(orders[3].pk)]["amount"] == "1.00"


def test_a_page_is_two_statements_compiled_once_per_process(tenant, orders):
    caller = api_for(tenant, diner=DINER)
    assert caller.get("/api/v1/orders/?page=2").status_code == 200  # compiles this shape
    with compiled_models() as compiled, CaptureQueriesContext(connection) as queries:
        answer = caller.get("/api/v1/orders/?page=1")
    assert answer.status_code == 200 and len(answer.json()["results"]) == PAGE
    assert compiled == []
    reads = [q["sql"] for q in queries if "ordering_" in q["sql"]]
    assert len(reads) == 2
    assert "COUNT(*)" in reads[0] and "LIMIT" in reads[0]
    assert "ordering_orderline" in reads[1] and "ordering_payment" in reads[1]


@pytest.mark.parametrize("page", ["4", "0", "-1", "abc", "99999999999999999999"])
def test_a_page_that_is_not_there_is_404(tenant, orders, page):
    answer = api_for(tenant, diner=DINER).get(f"/api/v1/orders/?page={page}")
    assert answer.status_code == 404
    assert answer.json()["code"] == "NOT_FOUND"


def test_an_empty_list_is_one_page_of_nothing(tenant):
    body = api_for(tenant, diner=DINER).get("/api/v1/orders/").json()
    assert body == {"count": 0, "next": None, "previous": None, "results": []}


def test_a_slice_other_than_the_expected_one_is_read_when_asked_for(tenant, orders):
    listed = OrderList(tenant=tenant, diner_id=DINER, status=None, expected=slice(0, PAGE))
    assert listed.count() == 45
    newest_first = [o.pk for o in orders[::-1]]
    assert [o.pk for o in listed[PAGE : 2 * PAGE]] == newest_first[PAGE : 2 * PAGE]
    assert [o.pk for o in listed[0:5]] == newest_first[:5]  # from the page read with the count
    assert [o.pk for o in listed[5:10]] == newest_first[5:10]


def test_where_statements_do_not_ride_along_the_orm_reads_a_page_with_its_prefetch(
    tenant, orders, monkeypatch
):
    """As on the embedded demo's SQLite: the count, the page with its coupons, its lines and
    its payments, four statements whatever the page's size, and the same answer."""
    caller = api_for(tenant, diner=DINER)
    expected = caller.get("/api/v1/orders/?page=2").json()
    monkeypatch.setattr(order_list, "statements_ride_along", lambda using: False)
    with CaptureQueriesContext(connection) as queries:
        answer = caller.get("/api/v1/orders/?page=2")
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
