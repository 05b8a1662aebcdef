"""Paying again after a declined card: a new payment on the same order, never two that can
both take the money unnoticed, and the order paid once whichever payment the provider confirms.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from ordering.background.saga import SagaOutcome, run_cancel_saga
from ordering.errors import OrderingError
from ordering.expiry import expire_unpaid_orders
from ordering.models import (
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    ProviderConflict,
    SimulatedOperation,
)
from ordering.models.orders import MAX_PAYMENT_ATTEMPTS
from ordering.payments.reconciliation import reconcile_payments
from ordering.payments.simulated import complete_payment, signed_callback
from ordering.services.lifecycle import cancel_order, expire_unpaid_order
from ordering.services.payments import pay_order
from tenants.models import ApiClient
from tests.conftest import api_for
from tests.payments.helpers import paying_order, post_callback
from tests.support.concurrency import at_once

S, P = OrderStatus, Payment.Status
Kind = ProviderConflict.Kind


def decline(payment: Payment) -> None:
    result = complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id, status="failed"
    )
    assert result.outcome == "applied", result


def succeed(payment: Payment) -> str:
    return complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id
    ).outcome


def declined_order(tenant, dish) -> tuple[Order, Payment]:
    """An order in PAYING whose one payment the provider declined."""
    order, payment = paying_order(tenant, dish)
    decline(payment)
    return order, payment


def pay(tenant, order: Order) -> tuple[Order, Payment]:
    return pay_order(tenant=tenant, order_id=order.pk, actor="diner")


def statuses(order: Order) -> list[str]:
    """The order's payments' statuses, oldest first."""
    return list(
        Payment.all_tenants.filter(order=order)
        .order_by("created_at")
        .values_list("status", flat=True)
    )


def paid_moves(order: Order) -> int:
    return OrderTransition.all_tenants.filter(order=order, to_status=S.PAID).count()


@pytest.mark.django_db
def test_a_declined_order_is_paid_again_and_the_second_payment_pays_it(tenant, menu):
    # given an order whose card was declined
    order, first = declined_order(tenant, menu["pizza"])
    stock = menu["pizza"].__class__.all_tenants.get(pk=menu["pizza"].pk).stock
    # when the diner pays again
    order, second = pay(tenant, order)
    # then the order is still PAYING with a new pending payment, the move logged as the diner's
    assert order.status == S.PAYING
    assert (second.status, statuses(order)) == (P.PENDING, [P.FAILED, P.PENDING])
    assert second.provider_txn_id != first.provider_txn_id
    move = OrderTransition.all_tenants.filter(order=order).order_by("-pk").first()
    assert (move.from_status, move.to_status, move.actor) == (S.PAYING, S.PAYING, "diner")
    # and the order it hands back holds both payments, the new one first
    assert [p.pk for p in order.payments.all()] == [second.pk, first.pk]
    # and when the provider confirms the new one, the order is paid, once, with its portions
    # taken once (when it was placed)
    assert succeed(second) == "applied"
    order.refresh_from_db()
    assert (order.status, statuses(order), paid_moves(order)) == (
        S.PAID,
        [P.FAILED, P.SUCCEEDED],
        1,
    )
    assert menu["pizza"].__class__.all_tenants.get(pk=menu["pizza"].pk).stock == stock


@pytest.mark.django_db
def test_paying_again_is_refused_while_a_payment_is_pending_or_once_paid(tenant, menu):
    order, payment = paying_order(tenant, menu["pizza"])
    with pytest.raises(OrderingError) as refused:
        pay(tenant, order)
    assert refused.value.error_code == "ORDER_STATUS_CONFLICT"
    assert refused.value.extra["order_status"] == S.PAYING
    # the diner is told why: wait for the provider, do not pay twice
    assert refused.value.detail.startswith(
        "A payment of this order is still pending: the payment provider decides it; "
        "pay again only once it is declined."
    )
    assert statuses(order) == [P.PENDING]
    assert succeed(payment) == "applied"
    with pytest.raises(OrderingError) as refused:
        pay(tenant, order)
    assert refused.value.extra["order_status"] == S.PAID
    assert statuses(order) == [P.SUCCEEDED]


@pytest.mark.django_db
def test_an_order_takes_at_most_its_attempts_of_payment(tenant, menu):
    order, payment = declined_order(tenant, menu["pizza"])
    for _ in range(MAX_PAYMENT_ATTEMPTS - 1):
        order, payment = pay(tenant, order)
        decline(payment)
    with pytest.raises(OrderingError) as refused:
        pay(tenant, order)
    assert refused.value.error_code == "ORDER_STATUS_CONFLICT"
    # the diner is told why, and what is left to do
    assert refused.value.detail.startswith(
        f"This order's {MAX_PAYMENT_ATTEMPTS} payments were all declined, the most one order "
        "may start: cancel it and order again."
    )
    # the refusal no longer offers paying again; cancelling is still open
    targets = [m["to"] for m in refused.value.extra["allowed_moves"]]
    assert S.PAYING not in targets and S.CANCELLED in targets
    assert statuses(order) == [P.FAILED] * MAX_PAYMENT_ATTEMPTS


@pytest.mark.django_db
def test_a_declined_order_allows_paying_again_in_its_conflict_answer(tenant, menu):
    # a move refused on a declined order names paying again among the moves it allows
    order, _ = declined_order(tenant, menu["pizza"])
    answer = api_for(tenant, kind=ApiClient.Kind.MERCHANT).post(
        f"/api/v1/orders/{order.pk}/transition/", {"to": S.ACCEPTED}, format="json"
    )
    assert answer.status_code == 409, answer.content
    assert {"to": S.PAYING, "by": ["diner"]} in answer.json()["allowed_moves"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_payments_again_make_one_payment(tenant, menu):
    # given a declined order, when 8 of the diner's devices pay again at the same instant
    order, _ = declined_order(tenant, menu["pizza"])
    results = at_once(*[lambda: pay(tenant, order)] * 8)
    # then one new payment; every other attempt is a 409 naming the order PAYING
    wins = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, OrderingError)]
    assert (len(wins), len(refused)) == (1, 7), results
    assert {r.error_code for r in refused} == {"ORDER_STATUS_CONFLICT"}
    assert statuses(order) == [P.FAILED, P.PENDING]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(6))
def test_paying_again_and_a_late_success_of_the_declined_payment_never_both_stay(
    tenant, menu, round_
):
    # given a declined order; when the diner pays again at the instant the provider reports
    # the declined payment taken after all
    order, first = declined_order(tenant, menu["pizza"])
    again, success = at_once(lambda: pay(tenant, order), lambda: succeed(first))
    assert success == "applied", success
    order.refresh_from_db()
    # then the order is paid once by the first payment, and no payment is left pending:
    # either the new one was refused, or it was voided as the order was paid
    assert (order.status, paid_moves(order)) == (S.PAID, 1)
    if isinstance(again, OrderingError):
        assert again.extra["order_status"] == S.PAID
        assert statuses(order) == [P.SUCCEEDED]
    else:
        assert statuses(order) == [P.SUCCEEDED, P.VOIDED]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(6))
@pytest.mark.parametrize("ender", ["cancel", "expiry"])
def test_paying_again_and_a_cancel_or_expiry_at_the_same_instant_leave_nothing_pending(
    tenant, menu, settings, ender, round_
):
    # given a declined order, old enough to expire; when the diner pays again at the instant
    # the order is cancelled (by the diner) or expired (by beat)
    settings.UNPAID_ORDER_EXPIRY_SECONDS = 1800
    order, _ = declined_order(tenant, menu["pizza"])
    long_ago = timezone.now() - timedelta(hours=1)
    Payment.all_tenants.filter(order=order).update(updated_at=long_ago)
    Order.all_tenants.filter(pk=order.pk).update(updated_at=long_ago)

    def end() -> object:
        if ender == "cancel":
            return cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
        return expire_unpaid_order(tenant=tenant, order_id=order.pk)

    again, ended = at_once(lambda: pay(tenant, order), end)
    # then the order ends CANCELLED (the cancel, or the expiry if it came first) or PAYING with
    # the new payment (the expiry, finding it, expires nothing), and a CANCELLED order never
    # keeps a pending payment (both committed, the new payment left pending, before)
    order.refresh_from_db()
    assert not isinstance(ended, Exception), ended
    if order.status == S.CANCELLED:
        assert P.PENDING not in statuses(order), (again, ended)
    else:
        assert (order.status, ended, statuses(order)) == (S.PAYING, False, [P.FAILED, P.PENDING])


@pytest.mark.django_db
def test_a_second_payment_taken_too_is_a_conflict_and_the_cancel_refunds_the_one_that_paid(
    tenant, menu
):
    # given a declined order paid again, then the declined payment reported taken after all
    order, first = declined_order(tenant, menu["pizza"])
    order, second = pay(tenant, order)
    assert succeed(first) == "applied"
    assert statuses(order) == [P.SUCCEEDED, P.VOIDED]
    # when the provider reports the second one taken as well
    assert succeed(second) == "conflict"
    # then the order stays paid once, and staff see the diner paid twice
    order.refresh_from_db()
    assert (order.status, paid_moves(order)) == (S.PAID, 1)
    conflict = ProviderConflict.objects.for_tenant(tenant).get(order=order)
    assert (conflict.kind, conflict.payment_id) == (Kind.PAID_TWICE, second.pk)
    # and the order shows the payment that paid it, not the newer voided one
    shown = (
        api_for(tenant, kind=ApiClient.Kind.MERCHANT)
        .get(f"/api/v1/orders/{order.pk}/")
        .json()["payment"]
    )
    assert (shown["provider_txn_id"], shown["status"]) == (first.provider_txn_id, P.SUCCEEDED)
    # and when the order is cancelled, the saga refunds the payment that paid it
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order=order, event_type=EventType.CANCEL_REQUESTED
    )
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert statuses(order) == [P.REFUNDED, P.VOIDED]
    refund = SimulatedOperation.objects.get(kind="refund")
    assert refund.reference == first.provider_txn_id


@pytest.mark.django_db
def test_the_same_capture_reported_again_under_another_event_is_one_conflict(tenant, menu):
    # given a declined order paid again, the declined one taken after all, then the second
    # one taken too: a paid_twice conflict
    order, first = declined_order(tenant, menu["pizza"])
    order, second = pay(tenant, order)
    assert succeed(first) == "applied"
    assert succeed(second) == "conflict"
    # when the provider reports that capture again under another event id
    body, headers = signed_callback(payment=second, event_id=f"evt_again_{uuid.uuid4().hex}")
    again = post_callback(APIClient(), body, headers)
    # then it is a duplicate: staff see one conflict for that money, not two to refund
    assert again.status_code == 200 and again.json()["result"] == "duplicate"
    assert ProviderConflict.objects.for_tenant(tenant).filter(payment=second).count() == 1


@pytest.mark.django_db
def test_reconciliation_finds_a_voided_payment_taken_and_reports_it_paid_twice(tenant, menu):
    # given a declined order paid again, the declined payment found taken (the new one voided),
    # and the diner's bank taking the voided one too, its callback lost
    order, first = declined_order(tenant, menu["pizza"])
    order, second = pay(tenant, order)
    assert succeed(first) == "applied"
    complete_payment(
        provider_name=second.provider, provider_txn_id=second.provider_txn_id, deliver=False
    )
    # when reconciliation asks the provider about it
    reconcile_payments(now=timezone.now() + timedelta(hours=1))
    # then staff see it; the order is still paid once
    conflict = ProviderConflict.objects.for_tenant(tenant).get(order=order)
    assert (conflict.kind, conflict.payment_id) == (Kind.PAID_TWICE, second.pk)
    order.refresh_from_db()
    assert (order.status, paid_moves(order)) == (S.PAID, 1)


@pytest.mark.django_db
def test_an_order_declined_again_expires_from_its_last_decline(tenant, menu, settings):
    settings.UNPAID_ORDER_EXPIRY_SECONDS = 1800
    order, _ = declined_order(tenant, menu["pizza"])
    order, second = pay(tenant, order)
    decline(second)
    Payment.all_tenants.filter(pk=second.pk).update(
        updated_at=timezone.now() - timedelta(minutes=20)
    )
    Payment.all_tenants.exclude(pk=second.pk).filter(order=order).update(
        updated_at=timezone.now() - timedelta(minutes=40)
    )
    # paid again 35 minutes ago, that payment declined only 20 minutes ago
    Order.all_tenants.filter(pk=order.pk).update(updated_at=timezone.now() - timedelta(minutes=35))
    # the last decline 20 min ago: not yet
    assert expire_unpaid_orders() == 0
    # 31 min after it: cancelled, its portions back
    assert expire_unpaid_orders(now=timezone.now() + timedelta(minutes=11)) == 1
    order.refresh_from_db()
    assert order.status == S.CANCELLED


@pytest.mark.django_db
def test_a_diner_pays_again_through_the_api_with_a_new_key(tenant, menu):
    api: APIClient = api_for(tenant, diner="diner-1")
    created = api.post(
        "/api/v1/orders/",
        {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"},
        format="json",
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert created.status_code == 201, created.content
    order_id = created.json()["id"]
    url = f"/api/v1/orders/{order_id}/pay/"
    first_key = str(uuid.uuid4())
    paying = api.post(url, headers={"Idempotency-Key": first_key})
    assert paying.status_code == 200, paying.content
    decline(Payment.all_tenants.get(order_id=order_id))
    # the first pay's key replays its answer: nothing new is started
    assert api.post(url, headers={"Idempotency-Key": first_key}).json() == paying.json()
    # a new key pays again: the answer shows the new payment, pending
    again = api.post(url, headers={"Idempotency-Key": str(uuid.uuid4())})
    assert again.status_code == 200, again.content
    assert (again.json()["status"], again.json()["payment"]["status"]) == (S.PAYING, P.PENDING)
    assert statuses(Order.all_tenants.get(pk=order_id)) == [P.FAILED, P.PENDING]
    # and once that one is pending, another new key is refused
    refused = api.post(url, headers={"Idempotency-Key": str(uuid.uuid4())})
    assert refused.status_code == 409
    assert refused.json()["code"] == "ORDER_STATUS_CONFLICT"
