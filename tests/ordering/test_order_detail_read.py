"""An order's detail is read in one round trip on PostgreSQL: the order (as the caller's) and its
lines, payments and log in one query (ordering/selectors.access_order), and the answer
what Django's own reads render."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering.api.rendering import render_order
from ordering.errors import OrderingError
from ordering.models import Order
from ordering.selectors import access_order
from tests.conftest import api_for, menu_for
from tests.ordering.test_read_related import RELATIONS, as_django_reads, two_orders, values_of
from tests.payments.helpers import paying_order
from tests.support.paying_flips import STATES, paying_flips

pytestmark = pytest.mark.django_db


def test_a_detail_is_one_query_and_shows_what_djangos_reads_show(tenant):
    # given an order of a diner with several lines, payments and log entries
    order = two_orders(tenant)[0]
    Order.all_tenants.filter(pk=order.pk).update(diner_id="diner-1")
    api = api_for(tenant, diner="diner-1")
    api.get("/api/v1/menu/")  # the caller's credential checked once already
    # when the diner reads its detail
    with CaptureQueriesContext(connection) as queries:
        answer = api.get(f"/api/v1/orders/{order.pk}/")
    # then one query read the order (as the caller's) and its three relations
    assert answer.status_code == 200, answer.content
    reads = [q["sql"] for q in queries.captured_queries if '"ordering_' in q["sql"]]
    assert len(reads) == 1
    statements = reads[0].split("; ")
    assert len(statements) == 1 + len(RELATIONS)
    assert f'"tenant_id" = {tenant.pk}' in statements[0]
    assert "'diner-1'" in statements[0]
    # and the answer is what the order renders as Django reads it
    read_by_django = Order.all_tenants.prefetch_related(*RELATIONS).get(pk=order.pk)
    expected = render_order(read_by_django, internal=False, detail=True)
    assert answer.json() == json.loads(json.dumps(expected))
    assert len(answer.json()["lines"]) == 2
    assert len(answer.json()["transitions"]) == 3


def test_the_order_comes_with_its_tenant_and_relations_in_hand(tenant):
    order = two_orders(tenant)[1]
    with CaptureQueriesContext(connection) as queries:
        read = access_order(tenant=tenant, order_id=order.pk, related=RELATIONS)
        held = values_of(read)
        assert read.tenant is tenant
        assert {row.order for name in RELATIONS for row in getattr(read, name).all()} == {read}
    assert len(queries.captured_queries) == 1
    assert held == as_django_reads(order)
    assert read.status == order.status
    assert read.total == order.total


@pytest.mark.parametrize("caller", ["another tenant", "another diner", "a key too large"])
def test_an_order_not_the_callers_is_not_found(tenant, other_tenant, caller):
    # given an order of diner-1 at the tenant
    order = two_orders(tenant)[0]
    Order.all_tenants.filter(pk=order.pk).update(diner_id="diner-1")
    asked = {
        "another tenant": {"tenant": other_tenant, "order_id": order.pk},
        "another diner": {"tenant": tenant, "order_id": order.pk, "diner_id": "diner-2"},
        "a key too large": {"tenant": tenant, "order_id": 2**63},
    }[caller]
    # when someone else asks for it, then it is not found
    with pytest.raises(OrderingError) as refused:
        access_order(related=RELATIONS, **asked)
    assert refused.value.error_code == "ORDER_NOT_FOUND"
    # while its own diner finds it
    found = access_order(tenant=tenant, order_id=order.pk, diner_id="diner-1", related=RELATIONS)
    assert found.pk == order.pk


@pytest.mark.django_db(transaction=True)  # as served: the read in no transaction of its own
def test_a_detail_never_shows_an_order_and_its_payment_from_two_moments(tenant):
    # given a paying order, and a writer that pays it and takes that back again and again,
    # each time the order and its payment in one transaction (as a provider's callback does)
    order = paying_order(tenant, menu_for(tenant)["pizza"])[0]
    payment = order.payments.get()
    # when its detail is read meanwhile, many times
    seen = []
    with paying_flips(order, payment) as flips:
        while len(seen) < 400 or len(flips) < 50:
            read = access_order(tenant=tenant, order_id=order.pk, related=("payments",))
            seen.append((read.status, read.payments.all()[0].status))
    # then every read shows the order and its payment as one committed moment left them
    assert set(seen) <= set(STATES), set(seen) - set(STATES)
