"""An order that costs nothing (a coupon covering it, free dishes): paying it settles it at
once, without a provider and without a Payment, and cancelling it refunds nothing.

Payment providers refuse a payment of 0.00, and a cancel of such a payment "refunded" 0.00
through the provider and booked a refund of nothing in the day's sales.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from ordering.errors import OrderingError
from ordering.models import (
    Compensation,
    Coupon,
    Dish,
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    SalesDay,
    SimulatedOperation,
)
from ordering.services.lifecycle import cancel_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import Tenant
from tests.conftest import api_for
from tests.support.concurrency import at_once

S = OrderStatus


def free_coupon(tenant: Tenant, **fields: object) -> Coupon:
    values = {"kind": Coupon.Kind.PERCENT, "value": Decimal("100"), "max_uses": 5} | fields
    return Coupon.objects.for_tenant(tenant).create(tenant=tenant, code="FREE", **values)


def a_free_order(tenant: Tenant, menu: dict[str, Dish]) -> Order:
    """A pizza placed with a coupon that covers it all: an order of 0.00 awaiting its pay."""
    free_coupon(tenant)
    return place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pizza"].pk, quantity=1)],
        payment_method="card",
        coupon_code="FREE",
        actor="test",
    )


def place(api: APIClient, dish: Dish, *, quantity: int = 1, coupon: str | None = "FREE") -> dict:
    body: dict = {
        "items": [{"dish_id": dish.pk, "quantity": quantity}],
        "payment_method": "card",
    }
    if coupon:
        body["coupon_code"] = coupon
    answer = api.post(
        "/api/v1/orders/", body, format="json", headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


def provider_operations(kind: str) -> int:
    return SimulatedOperation.objects.filter(kind=kind).count()


@pytest.mark.django_db(transaction=True)  # the order.paid event's consumer runs after commit
@pytest.mark.parametrize(
    ("coupon", "price"),
    [
        ({"kind": Coupon.Kind.PERCENT, "value": Decimal("100")}, "9.50"),
        ({"kind": Coupon.Kind.AMOUNT, "value": Decimal("19.00")}, "9.50"),  # exactly the total
        ({"kind": Coupon.Kind.AMOUNT, "value": Decimal("50.00")}, "9.50"),  # more than it
        (None, "0.00"),  # free dishes, no coupon
    ],
    ids=["percent-100", "amount-equal", "amount-above", "free-dish"],
)
def test_paying_an_order_that_costs_nothing_settles_it_without_a_payment(
    tenant, menu, coupon, price
):
    # given an order of 2 dishes whose total comes to 0.00
    dish = menu["pizza"]
    Dish.all_tenants.filter(pk=dish.pk).update(price=Decimal(price))
    if coupon:
        free_coupon(tenant, **coupon)
    api = api_for(tenant, diner="diner-1")
    placed = place(api, dish, quantity=2, coupon="FREE" if coupon else None)
    assert (placed["total"], placed["discount"]) == ("0.00", placed["subtotal"])
    # when the diner pays it
    url = f"/api/v1/orders/{placed['id']}/pay/"
    key = str(uuid.uuid4())
    paid = api.post(url, headers={"Idempotency-Key": key})
    # then it is PAID at once, with no payment: the provider was never asked
    assert paid.status_code == 200, paid.content
    assert (paid.json()["status"], paid.json()["payment"]) == (S.PAID, None)
    assert [(t["from_status"], t["to_status"]) for t in paid.json()["transitions"]] == [
        ("", S.CREATED),
        (S.CREATED, S.PAID),
    ]
    assert not Payment.all_tenants.exists()
    assert not SimulatedOperation.objects.exists()
    # and its order.paid event says why, and counts a sale of nothing
    [event] = OutboxEvent.all_tenants.filter(event_type=EventType.ORDER_PAID)
    assert event.payload == {"settled": "nothing_to_pay", "amount": "0.00", "currency": "EUR"}
    [day] = SalesDay.all_tenants.filter(tenant=tenant)
    assert (day.paid_orders, day.revenue) == (1, Decimal("0.00"))
    # when the pay is retried with the same key: the same answer, byte for byte, nothing new
    again = api.post(url, headers={"Idempotency-Key": key})
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == paid.content
    # and with a new key: refused, the order already paid
    refused = api.post(url, headers={"Idempotency-Key": str(uuid.uuid4())})
    assert refused.status_code == 409
    assert refused.json()["code"] == "ORDER_STATUS_CONFLICT"
    assert OrderTransition.all_tenants.filter(to_status=S.PAID).count() == 1
    assert OutboxEvent.all_tenants.filter(event_type=EventType.ORDER_PAID).count() == 1
    assert not Payment.all_tenants.exists()


@pytest.mark.django_db
def test_an_order_that_costs_something_still_starts_a_payment(tenant, menu):
    # given an order a coupon brings to 0.01, not 0.00
    free_coupon(tenant, kind=Coupon.Kind.AMOUNT, value=Decimal("9.49"))
    api = api_for(tenant, diner="diner-1")
    placed = place(api, menu["pizza"])
    assert placed["total"] == "0.01"
    # when it is paid, a payment of 0.01 starts at the provider
    paying = api.post(f"/api/v1/orders/{placed['id']}/pay/")
    assert paying.status_code == 200, paying.content
    assert paying.json()["status"] == S.PAYING
    assert paying.json()["payment"]["amount"] == "0.01"


@pytest.mark.django_db
def test_a_free_order_offers_paid_not_paying_in_its_conflict_answer(tenant, menu):
    # given a free order not paid yet, when the merchant tries to accept it
    free_coupon(tenant)
    placed = place(api_for(tenant, diner="diner-1"), menu["pizza"])
    answer = api_for(tenant, kind="merchant").post(
        f"/api/v1/orders/{placed['id']}/transition/", {"to": S.ACCEPTED}, format="json"
    )
    # then the moves it names lead to PAID (the diner confirming it) or CANCELLED, not PAYING
    assert answer.status_code == 409, answer.content
    assert [move["to"] for move in answer.json()["allowed_moves"]] == [S.PAID, S.CANCELLED]


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_settled_free_order_refunds_nothing(tenant, menu):
    # given a free order, paid (settled) through the API
    coupon = free_coupon(tenant)
    api = api_for(tenant, diner="diner-1")
    placed = place(api, menu["pizza"], quantity=3)
    assert api.post(f"/api/v1/orders/{placed['id']}/pay/").status_code == 200
    # when the diner cancels it, twice with the same key
    url = f"/api/v1/orders/{placed['id']}/cancel/"
    key = str(uuid.uuid4())
    cancelled = api.post(url, headers={"Idempotency-Key": key})
    assert cancelled.status_code == 200, cancelled.content
    assert api.post(url, headers={"Idempotency-Key": key}).content == cancelled.content
    # then the saga ends it CANCELLED, its portions and coupon use given back
    order = Order.all_tenants.get(pk=placed["id"])
    assert order.status == S.CANCELLED
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 50
    assert Coupon.all_tenants.get(pk=coupon.pk).used_count == 0
    # and nothing was refunded: no provider refund, no refund booked in the day's sales
    refund = Compensation.all_tenants.get(order=order, step=Compensation.Step.REFUND_PAYMENT)
    assert (refund.status, refund.result) == (Compensation.Status.DONE, {"refund_id": None})
    assert provider_operations(SimulatedOperation.Kind.REFUND) == 0
    assert provider_operations(SimulatedOperation.Kind.DELIVERY_CANCEL) == 1  # the courier told
    [day] = SalesDay.all_tenants.filter(tenant=tenant)
    assert (day.refunded_orders, day.refunds) == (0, Decimal("0.00"))


@pytest.mark.django_db(transaction=True)
def test_a_payment_of_nothing_made_before_is_not_refunded_on_cancel(tenant, menu):
    # given a free order paid, before this rule, through a payment of 0.00 the provider took
    order = a_free_order(tenant, menu)
    Order.all_tenants.filter(pk=order.pk).update(status=S.PAID)
    Payment.objects.for_tenant(tenant).create(
        tenant=tenant,
        order=order,
        provider="simulated",
        provider_txn_id="sim_legacy",
        method="card",
        amount=Decimal("0.00"),
        status=Payment.Status.SUCCEEDED,
    )
    # when it is cancelled
    cancel_order(tenant=tenant, order_id=order.pk, actor="test")
    # then it ends CANCELLED with no refund asked of the provider, none booked
    order.refresh_from_db()
    assert order.status == S.CANCELLED
    assert provider_operations(SimulatedOperation.Kind.REFUND) == 0
    assert not SalesDay.all_tenants.filter(tenant=tenant, refunded_orders__gt=0).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_pays_of_a_free_order_settle_it_once(tenant, menu):
    # given a free order, when 8 of the diner's devices pay it at the same instant
    order = a_free_order(tenant, menu)
    results = at_once(*[lambda: pay_order(tenant=tenant, order_id=order.pk, actor="diner")] * 8)
    # then one settles it; the others are refused, and it holds one PAID move and one event
    wins = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, OrderingError)]
    assert (len(wins), len(refused)) == (1, 7), results
    assert {r.error_code for r in refused} == {"ORDER_STATUS_CONFLICT"}
    assert OrderTransition.all_tenants.filter(order=order, to_status=S.PAID).count() == 1
    assert OutboxEvent.all_tenants.filter(order=order, event_type=EventType.ORDER_PAID).count() == 1
    assert not Payment.all_tenants.exists()
