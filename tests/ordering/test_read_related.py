"""ordering/prefetch.read_related: an order's relations read by SQL compiled once per relation,
the same rows in the same order as Django's own relation reads, with no query left for them."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection
from django.db.models.fields.related_descriptors import ReverseManyToOneDescriptor
from django.test.utils import CaptureQueriesContext

from ordering.models import Order, OrderLine, OrderTransition, Payment
from ordering.prefetch import _READS, read_related, with_related
from ordering.services.placing import ItemRequest, place_order
from tests.conftest import menu_for

pytestmark = pytest.mark.django_db
RELATIONS = ("lines", "payments", "transitions")


def two_orders(tenant) -> list[Order]:
    menu = menu_for(tenant)
    placed = []
    for quantities in ((3, 1), (1, 2)):
        order = place_order(
            tenant=tenant,
            items=[
                ItemRequest(dish_id=menu["pasta"].pk, quantity=quantities[0]),
                ItemRequest(dish_id=menu["pizza"].pk, quantity=quantities[1]),
            ],
            payment_method="card",
            actor="test",
        )
        for status in ("PAYING", "CANCELLED"):
            OrderTransition.objects.for_tenant(tenant).create(
                tenant=tenant, order=order, from_status="", to_status=status, actor="test"
            )
        Payment.objects.for_tenant(tenant).bulk_create(
            Payment(
                tenant=tenant,
                order=order,
                provider="simulated",
                provider_txn_id=f"{order.pk}-{attempt}",
                method="card",
                amount=Decimal(attempt),
                currency="EUR",
            )
            for attempt in (1, 2)
        )
        placed.append(order)
    return placed


def values_of(order: Order) -> dict[str, list[tuple]]:
    return {name: [_values(row) for row in getattr(order, name).all()] for name in RELATIONS}


def as_django_reads(order: Order) -> dict[str, list[tuple]]:
    return values_of(Order.all_tenants.get(pk=order.pk))


def _values(row) -> tuple:
    return tuple(getattr(row, f.attname) for f in type(row)._meta.concrete_fields)


def test_each_relation_reads_what_django_reads_then_no_query(tenant):
    # given two orders, each with several lines, payments and transitions
    for order in two_orders(tenant):
        # when their relations are read (the second order by the SQL the first one compiled)
        fresh = Order.all_tenants.get(pk=order.pk)
        with CaptureQueriesContext(connection) as reading:
            read_related(fresh, *RELATIONS)
        # then all three went in one query (one round trip), each relation holds the rows
        # Django reads, in the same order and with the same values (decimals and times
        # converted alike), each row holds its order, and reading them again sends nothing
        assert len(reading.captured_queries) == 1
        with CaptureQueriesContext(connection) as queries:
            held = values_of(fresh)
            owners = {row.order for name in RELATIONS for row in getattr(fresh, name).all()}
        assert queries.captured_queries == []
        assert owners == {fresh}
        assert all(row.order is fresh for row in fresh.lines.all())
        assert held == as_django_reads(order)
        assert [len(held[name]) for name in RELATIONS] == [2, 2, 3]
    # and the text was compiled once per relation
    compiled = {name: read for (model, name, _), read in _READS.items() if model is Order}
    assert set(compiled) == set(RELATIONS)
    assert None not in compiled.values()


def test_an_order_without_rows_in_a_relation_holds_an_empty_one(tenant):
    menu = menu_for(tenant)
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pizza"].pk, quantity=1)],
        payment_method="card",
        actor="test",
    )
    fresh = read_related(Order.all_tenants.get(pk=order.pk), *RELATIONS)
    assert list(fresh.payments.all()) == []
    assert [type(line) for line in fresh.lines.all()] == [OrderLine]


def test_a_held_relation_is_the_queryset_django_s_manager_makes(tenant):
    """Rows held by ``with_related`` answer with no query; chained, the queryset reads this
    order's rows only, as Django's related manager's would, each holding the order."""
    first, second = two_orders(tenant)
    django_s = Order.all_tenants.get(pk=first.pk).lines.all()
    rows = list(django_s)
    order = Order.all_tenants.get(pk=first.pk)
    # made directly, without a related manager (the point of with_related's own queryset)
    with mock.patch.object(ReverseManyToOneDescriptor, "__get__", side_effect=AssertionError):
        held = with_related(order, lines=rows)
    with CaptureQueriesContext(connection) as queries:
        assert list(held.lines.all()) == rows
        assert held.lines.count() == 2 and held.lines.all()[1] == rows[1]
    assert len(queries) == 0
    assert str(held.lines.all().query) == str(django_s.query)
    chained = list(held.lines.filter(quantity__gte=1).order_by("-id"))
    assert [line.pk for line in chained] == [line.pk for line in rows[::-1]]
    assert all(line.order is held for line in chained)
    assert not set(second.lines.values_list("pk", flat=True)) & {line.pk for line in chained}
