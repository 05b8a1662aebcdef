"""The order lifecycle: every move from every status, and races decided by the database."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest

from ordering.errors import OrderingError
from ordering.models import Order, OrderStatus, OrderTransition
from ordering.services.lifecycle import apply_transition, cancel_order, transition_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import Tenant
from tests.support.concurrency import at_once

S = OrderStatus

# move name -> (allowed source statuses, target)
MOVES: dict[str, tuple[set[str], str]] = {
    "start_payment": ({S.CREATED}, S.PAYING),
    "mark_paid": ({S.PAYING}, S.PAID),
    "accept": ({S.PAID}, S.ACCEPTED),
    "start_preparing": ({S.ACCEPTED}, S.PREPARING),
    "mark_ready": ({S.PREPARING}, S.READY),
    "dispatch": ({S.READY}, S.DELIVERING),
    "complete": ({S.DELIVERING}, S.COMPLETED),
    "cancel_unpaid": ({S.CREATED, S.PAYING}, S.CANCELLED),
    "request_cancel": ({S.PAID, S.ACCEPTED, S.PREPARING, S.READY}, S.CANCELLING),
    "finish_cancel": ({S.CANCELLING}, S.CANCELLED),
}
CASES = [
    pytest.param(move, status, status in sources, target, id=f"{status}-{move}")
    for move, (sources, target) in MOVES.items()
    for status in S.values
]


def new_order(tenant: Tenant, menu: dict, status: str = S.CREATED) -> Order:
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pizza"].pk, quantity=1)],
        payment_method="card",
        actor="test",
    )
    if status != S.CREATED:
        Order.all_tenants.filter(pk=order.pk).update(status=status)
    return Order.objects.for_tenant(tenant).get(pk=order.pk)


@pytest.mark.django_db
@pytest.mark.parametrize(("move", "status", "allowed", "target"), CASES)
def test_every_move_from_every_status(tenant, menu, move, status, allowed, target):
    # given an order in `status`
    order = new_order(tenant, menu, status)
    logged = OrderTransition.objects.for_tenant(tenant).count()
    # when the move is applied
    if allowed:
        apply_transition(order, getattr(order, move), actor="tester")
        # then the status changed in the database and one log row says so
        assert Order.objects.for_tenant(tenant).get(pk=order.pk).status == target
        entry = OrderTransition.objects.for_tenant(tenant).latest("id")
        assert (entry.from_status, entry.to_status, entry.actor) == (status, target, "tester")
    else:
        with pytest.raises(OrderingError) as err:
            apply_transition(order, getattr(order, move), actor="tester")
        assert err.value.error_code == "ORDER_STATUS_CONFLICT"
        assert err.value.status_code == 409
        assert Order.objects.for_tenant(tenant).get(pk=order.pk).status == status
    assert OrderTransition.objects.for_tenant(tenant).count() == logged + (1 if allowed else 0)


@pytest.mark.django_db
def test_start_payment_needs_no_payment_attached(tenant, menu):
    # given an order that already has its payment, put back in CREATED by hand
    order, _ = pay_order(tenant=tenant, order_id=new_order(tenant, menu).pk, actor="t")
    Order.all_tenants.filter(pk=order.pk).update(status=S.CREATED)
    order = Order.objects.for_tenant(tenant).get(pk=order.pk)
    # when paying again, then the condition refuses
    with pytest.raises(OrderingError) as err:
        pay_order(tenant=tenant, order_id=order.pk, actor="t")
    assert err.value.error_code == "ORDER_STATUS_CONFLICT"
    assert order.payments.count() == 1


@pytest.mark.django_db
def test_cancel_unpaid_returns_stock_coupon_and_voids_payment(tenant, menu, coupon):
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pasta"].pk, quantity=3)],
        payment_method="card",
        coupon_code="TEN",
        actor="t",
    )
    pay_order(tenant=tenant, order_id=order.pk, actor="t")
    menu["pasta"].refresh_from_db()
    assert menu["pasta"].stock == 47
    cancelled = cancel_order(tenant=tenant, order_id=order.pk, actor="t")
    menu["pasta"].refresh_from_db()
    coupon.refresh_from_db()
    order.refresh_from_db()
    assert (order.status, menu["pasta"].stock, coupon.used_count) == (S.CANCELLED, 50, 0)
    assert order.payments.get().status == "voided"
    # and the order the cancel hands back shows the payment voided too
    assert [payment.status for payment in cancelled.payments.all()] == ["voided"]


@pytest.mark.django_db
def test_cancel_paid_goes_to_cancelling_and_keeps_stock(tenant, menu):
    order = new_order(tenant, menu, S.PREPARING)
    cancel_order(tenant=tenant, order_id=order.pk, actor="t")
    menu["pizza"].refresh_from_db()
    assert Order.objects.for_tenant(tenant).get(pk=order.pk).status == S.CANCELLING
    assert menu["pizza"].stock == 49


@pytest.mark.django_db
def test_merchant_target_validation(tenant, menu):
    order = new_order(tenant, menu, S.PAID)
    with pytest.raises(OrderingError) as err:
        transition_order(tenant=tenant, order_id=order.pk, target="PAID", actor="m")
    assert err.value.error_code == "INVALID_TRANSITION_TARGET"
    transition_order(tenant=tenant, order_id=order.pk, target="ACCEPTED", actor="m")
    assert Order.objects.for_tenant(tenant).get(pk=order.pk).status == S.ACCEPTED


def race(workers: int, action: Callable[[], object]) -> list[object]:
    """Run ``action`` in ``workers`` threads released at the same instant; each thread has its
    own database connection. Returns each result or the exception it raised."""
    return at_once(*[action] * workers, timeout=30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("target", [S.ACCEPTED, S.CANCELLED])
def test_concurrent_same_transition_exactly_one_wins(tenant, menu, target):
    # given a PAID order
    order = new_order(tenant, menu, S.PAID)
    # when 8 callers move it at once
    results = race(
        8, lambda: transition_order(tenant=tenant, order_id=order.pk, target=target, actor="m")
    )
    # then exactly one wins; every other gets 409 ORDER_STATUS_CONFLICT; one log row
    wins = [r for r in results if isinstance(r, Order)]
    conflicts = [r for r in results if isinstance(r, OrderingError)]
    assert len(wins) == 1 and len(conflicts) == 7, results
    assert {c.error_code for c in conflicts} == {"ORDER_STATUS_CONFLICT"}
    # and each loser is told the status the winner left, not the one it failed to save
    assert {c.extra["order_status"] for c in conflicts} == {wins[0].status}
    assert (
        OrderTransition.objects.for_tenant(tenant)
        .filter(order_id=order.pk)
        .exclude(from_status="")
        .count()
        == 1
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_pay_makes_one_payment(tenant, menu):
    order = new_order(tenant, menu)
    results = race(8, lambda: pay_order(tenant=tenant, order_id=order.pk, actor="d"))
    assert sum(isinstance(r, tuple) for r in results) == 1
    assert order.payments.count() == 1
    assert order.payments.get().amount == Decimal("9.50")
