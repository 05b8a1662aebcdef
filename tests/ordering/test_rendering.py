"""The API's order rendering writes exactly what the serializers (the documented shapes) do."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import Prefetch

from ordering.api.rendering import render_order
from ordering.api.serializers import (
    DinerOrderDetailSerializer,
    DinerOrderSerializer,
    OrderDetailSerializer,
    OrderSerializer,
)
from ordering.models import Order, Payment
from ordering.services.lifecycle import cancel_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order

SHAPES = [
    pytest.param(OrderDetailSerializer, True, True, id="merchant-detail"),
    pytest.param(OrderSerializer, True, False, id="merchant-list"),
    pytest.param(DinerOrderDetailSerializer, False, True, id="diner-detail"),
    pytest.param(DinerOrderSerializer, False, False, id="diner-list"),
]


def orders_of_every_kind(tenant, menu) -> list[Order]:
    """One line; two lines with a coupon; paid and then cancelled (payment, several steps)."""
    plain = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pizza"].pk, 1)],
        payment_method="card",
        actor="api:k",
    )
    with_coupon = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pasta"].pk, 2), ItemRequest(menu["pizza"].pk, 3)],
        payment_method="wallet",
        coupon_code="TEN",
        note="no onions",
        diner_id="d1",
        actor="api:k/diner:d1",
    )
    moved = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pizza"].pk, 2)],
        payment_method="card",
        diner_id="d2",
        actor="api:k/diner:d2",
    )
    pay_order(tenant=tenant, order_id=moved.pk, diner_id="d2", actor="api:k/diner:d2")
    cancel_order(tenant=tenant, order_id=moved.pk, diner_id="d2", actor="api:k/diner:d2")
    return [plain, with_coupon, moved]


@pytest.mark.django_db
@pytest.mark.parametrize(("serializer", "internal", "detail"), SHAPES)
def test_rendering_equals_the_serializer(tenant, menu, coupon, serializer, internal, detail):
    # given orders of every kind, read back as the API reads them
    ids = [o.pk for o in orders_of_every_kind(tenant, menu)]
    orders = (
        Order.objects.for_tenant(tenant)
        .filter(pk__in=ids)
        .select_related("coupon")
        .prefetch_related(
            "lines",
            "transitions",
            Prefetch("payments", queryset=Payment.all_tenants.order_by("-created_at")),
        )
    )
    assert len(orders) == 3
    for order in orders:
        # then the fast rendering is the serializer's output, field for field and in order
        expected = serializer(order).data
        rendered = render_order(order, internal=internal, detail=detail)
        assert rendered == expected
        assert list(rendered) == list(expected)
    assert any(o.coupon_id for o in orders) and any(o.payments.all() for o in orders)
    assert Decimal(expected["total"]) >= 0


@pytest.mark.django_db
def test_the_latest_payment_is_shown_whether_prefetched_or_not(tenant, menu, coupon):
    order = orders_of_every_kind(tenant, menu)[2]  # paid, then cancelled
    first = Payment.all_tenants.get(order=order)
    later = Payment.all_tenants.create(
        tenant=tenant,
        order=order,
        provider=first.provider,
        provider_txn_id=f"{first.provider_txn_id}-later",
        method=first.method,
        amount=first.amount,
        status=Payment.Status.FAILED,
    )
    read = Order.objects.for_tenant(tenant).get(pk=order.pk)
    prefetched = Order.objects.for_tenant(tenant).prefetch_related("payments").get(pk=order.pk)

    for shown in (read, prefetched):
        rendered = render_order(shown, internal=True, detail=True)
        assert rendered["payment"]["status"] == later.status
        assert OrderDetailSerializer(shown).data["payment"] == rendered["payment"]
