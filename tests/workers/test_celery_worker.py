"""Layer 4 against a real Celery worker process: duplicates, a SIGKILL mid-step, retries, dead
letters and the outbox sweeper — each effect exactly once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from ordering.background import dispatch
from ordering.background.dead_letters import is_flagged, requeue_dead_letter
from ordering.models import (
    Compensation,
    DeadLetter,
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    ProcessedEvent,
    ProviderConflict,
    SalesDay,
    SimulatedOperation,
)
from ordering.payments.simulated import complete_payment
from ordering.services.lifecycle import apply_transition, cancel_order
from ordering.simulation import plan_fault
from tests.payments.helpers import paid_order, paying_order
from tests.support.waiting import wait_until
from tests.workers.conftest import CeleryWorker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
S = OrderStatus
Step = Compensation.Step


def processed(event: OutboxEvent) -> ProcessedEvent | None:
    return ProcessedEvent.all_tenants.filter(
        order_id=event.order_id, event_type=event.event_type, version=event.version
    ).first()


def status_of(order: Order) -> str:
    return Order.all_tenants.values_list("status", flat=True).get(pk=order.pk)


def cancel(tenant, order: Order) -> OutboxEvent:
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    return OutboxEvent.all_tenants.get(order=order, event_type=EventType.CANCEL_REQUESTED)


def test_the_same_message_delivered_twice_has_one_effect(celery_worker, tenant, menu):
    # given a paid order whose order.paid event the worker consumed once (published at commit)
    order, _ = paid_order(tenant, menu["pizza"], quantity=2)
    paid = OutboxEvent.all_tenants.get(order=order, event_type=EventType.ORDER_PAID)
    wait_for(lambda: processed(paid), worker=celery_worker)
    # when the broker delivers the same message twice more
    dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, paid.pk)
    dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, paid.pk)
    wait_for(lambda: processed(paid).duplicates == 2, worker=celery_worker)
    # then the sale was counted once
    day = SalesDay.objects.for_tenant(tenant).get()
    assert (day.paid_orders, day.revenue) == (1, Decimal("19.00"))
    assert ProcessedEvent.objects.for_tenant(tenant).count() == 1

    # and the same for the cancel saga: run once, then its message delivered twice more
    cancel_event = cancel(tenant, order)
    wait_for(lambda: status_of(order) == S.CANCELLED, worker=celery_worker)
    dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, cancel_event.pk)
    dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, cancel_event.pk)
    wait_for(lambda: processed(cancel_event).duplicates == 2, worker=celery_worker)
    menu["pizza"].refresh_from_db()
    assert menu["pizza"].stock == 50
    refund = SimulatedOperation.objects.get(kind="refund")
    assert (refund.calls, refund.amount) == (1, Decimal("19.00"))


def test_a_worker_killed_mid_step_is_redelivered_and_the_step_happens_once(
    celery_worker: CeleryWorker, tenant, menu, coupon
):
    # given a paid order whose refund the provider performs and then answers slowly (3 s)
    order, payment = paid_order(tenant, menu["pizza"], quantity=2, coupon_code="TEN")
    plan_fault(order=order, step=Step.REFUND_PAYMENT, delay_times=1, delay_seconds=3)
    # when the cancel saga reaches the refund and the worker is SIGKILLed while it waits
    cancel(tenant, order)
    wait_for(
        lambda: SimulatedOperation.objects.filter(kind="refund").exists(),
        worker=celery_worker,
    )
    celery_worker.kill()
    assert status_of(order) == S.CANCELLING
    # and a replacement worker starts
    celery_worker.start()
    # then the unacknowledged message is redelivered (after the visibility timeout) and the
    # saga completes without a second refund, restock or coupon return
    wait_for(lambda: status_of(order) == S.CANCELLED, worker=celery_worker)
    refund = SimulatedOperation.objects.get(kind="refund")
    assert refund.calls == 2  # the provider was asked again, with the same key
    refund_step = Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_PAYMENT)
    assert (refund_step.attempts, refund_step.result["replayed"]) == (2, True)
    menu["pizza"].refresh_from_db()
    coupon.refresh_from_db()
    payment.refresh_from_db()
    assert (menu["pizza"].stock, coupon.used_count, payment.status) == (50, 0, "refunded")
    assert SimulatedOperation.objects.filter(kind="delivery_cancel").get().calls == 1
    assert list(
        Compensation.objects.for_tenant(tenant).values_list("step", "status", "attempts")
    ) == [
        ("restore_stock", "done", 1),
        ("return_coupon", "done", 1),
        ("cancel_delivery", "done", 1),
        ("refund_payment", "done", 2),
    ]


def test_money_taken_after_a_cancel_is_refunded_once_by_a_worker_killed_mid_refund(
    celery_worker: CeleryWorker, tenant, menu
):
    # given an order cancelled while its payment was pending, and a provider that performs
    # a refund and then answers slowly (3 s)
    order, payment = paying_order(tenant, menu["pizza"], quantity=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=order, step=Step.REFUND_PAYMENT, delay_times=1, delay_seconds=3)
    # when the provider reports the payment taken after all
    result = complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id
    )
    assert (result.outcome, result.conflict) == ("conflict", "paid_after_cancel")
    # and the worker refunding it is SIGKILLed while the provider answers
    wait_for(
        lambda: SimulatedOperation.objects.filter(kind="refund").exists(),
        worker=celery_worker,
    )
    celery_worker.kill()
    celery_worker.start()
    # then the redelivered message finishes the refund without moving the money again
    wait_for(
        lambda: Payment.all_tenants.get(pk=payment.pk).status == Payment.Status.REFUNDED,
        worker=celery_worker,
    )
    refund = SimulatedOperation.objects.get(kind="refund")
    assert (refund.calls, refund.amount, refund.reference) == (
        2,
        Decimal("19.00"),
        payment.provider_txn_id,
    )
    step = Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_CAPTURE)
    assert (step.status, step.attempts, step.result["replayed"]) == ("done", 2, True)
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    assert (conflict.resolved, conflict.outcome) == (True, "refunded")
    assert status_of(order) == S.CANCELLED


def test_a_step_failing_twice_then_succeeding_ends_cancelled(celery_worker, tenant, menu):
    order, _ = paid_order(tenant, menu["pizza"])
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=2)
    cancel(tenant, order)
    wait_for(lambda: status_of(order) == S.CANCELLED, worker=celery_worker)
    refund_step = Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_PAYMENT)
    assert (refund_step.attempts, refund_step.status, refund_step.last_error) == (3, "done", "")
    assert SimulatedOperation.objects.get(kind="refund").calls == 1
    assert Payment.objects.for_tenant(tenant).get().status == Payment.Status.REFUNDED
    assert not DeadLetter.objects.exists()


def test_failing_past_the_limit_dead_letters_and_requeue_completes_it(celery_worker, tenant, menu):
    # given a courier service that fails 4 times in a row (1 attempt + 3 retries)
    order, _ = paid_order(tenant, menu["pizza"])
    plan_fault(order=order, step=Step.CANCEL_DELIVERY, fail_times=4)
    event = cancel(tenant, order)
    # then the saga ends in a dead letter and the order stays CANCELLING, flagged
    wait_for(lambda: DeadLetter.objects.exists(), worker=celery_worker)
    letter = DeadLetter.objects.get()
    assert (letter.attempts, letter.state, letter.payload["args"]) == (4, "open", [event.pk])
    assert "simulated failure of cancel_delivery" in letter.error
    assert status_of(order) == S.CANCELLING and is_flagged(order)
    assert not SimulatedOperation.objects.filter(kind="refund").exists()
    # when staff requeue it, then the worker completes the saga
    requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:test")
    wait_for(lambda: status_of(order) == S.CANCELLED, worker=celery_worker)
    assert DeadLetter.objects.get().state == "requeued" and not is_flagged(order)
    assert SimulatedOperation.objects.get(kind="refund").calls == 1
    delivery = Compensation.objects.for_tenant(tenant).get(step=Step.CANCEL_DELIVERY)
    assert (delivery.status, delivery.attempts) == ("done", 1)


def test_the_sweeper_publishes_an_event_whose_publish_was_lost(celery_worker, tenant, menu):
    # given an order paid in a transaction that committed its outbox row, by a process that
    # died before its after-commit publish (so no publish was ever scheduled)
    order, _ = paying_order(tenant, menu["pizza"])
    with transaction.atomic():
        order = Order.all_tenants.select_related("tenant").get(pk=order.pk)
        apply_transition(order, order.mark_paid, actor="provider:simulated")
        lost = OutboxEvent.all_tenants.create(
            tenant=tenant, order=order, event_type=EventType.ORDER_PAID, version=3
        )
    OutboxEvent.all_tenants.filter(pk=lost.pk).update(
        created_at=timezone.now() - timedelta(minutes=1)
    )
    assert processed(lost) is None
    # when the periodic sweep runs in the worker
    dispatch.enqueue(dispatch.SWEEP_OUTBOX)
    # then the row is published and consumed, once
    wait_for(lambda: processed(lost), worker=celery_worker)
    lost.refresh_from_db()
    assert lost.published_at is not None and lost.publish_attempts == 1
    assert SalesDay.objects.for_tenant(tenant).get().paid_orders == 1


def test_a_cancel_whose_message_the_broker_lost_is_refunded_once(celery_worker, tenant, menu):
    # given a paid order whose cancel committed and whose message the broker accepted, then
    # lost (Redis restarted without its data): published, never consumed
    order, _ = paid_order(tenant, menu["pizza"])
    wait_for(
        lambda: processed(
            OutboxEvent.all_tenants.get(order=order, event_type=EventType.ORDER_PAID)
        ),
        worker=celery_worker,
    )
    with transaction.atomic():
        order = Order.all_tenants.select_related("tenant").get(pk=order.pk)
        apply_transition(order, order.request_cancel, actor="diner")
        lost = OutboxEvent.all_tenants.create(
            tenant=tenant, order=order, event_type=EventType.CANCEL_REQUESTED, version=4
        )
    eleven_minutes_ago = timezone.now() - timedelta(minutes=11)
    OutboxEvent.all_tenants.filter(pk=lost.pk).update(
        created_at=eleven_minutes_ago,
        published_at=eleven_minutes_ago,
        last_publish_at=eleven_minutes_ago,
        publish_attempts=1,
        resend_at=eleven_minutes_ago + timedelta(minutes=10),
    )
    # when the periodic sweep runs in the worker
    dispatch.enqueue(dispatch.SWEEP_OUTBOX)
    # then the event is sent again and the saga refunds the order, once
    wait_for(lambda: status_of(order) == S.CANCELLED, worker=celery_worker)
    wait_for(lambda: OutboxEvent.all_tenants.get(pk=lost.pk).consumed_at, worker=celery_worker)
    assert SimulatedOperation.objects.get(kind="refund").calls == 1
    assert OutboxEvent.all_tenants.get(pk=lost.pk).publish_attempts == 2
    # and, consumed, it is not sent again
    dispatch.enqueue(dispatch.SWEEP_OUTBOX)
    wait_until(lambda: not celery_worker.busy(), what="the sweep to run")
    assert OutboxEvent.all_tenants.get(pk=lost.pk).publish_attempts == 2


def test_the_simulated_provider_confirms_after_its_delay(celery_worker, settings, tenant, menu):
    # given the demo's auto-confirming provider (the delay stays under the 10 s visibility
    # timeout: the worker holds the countdown message unacknowledged until it is due)
    settings.SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS = DELAY = 2.0
    # when a payment starts
    order, _ = paying_order(tenant, menu["pizza"])
    # then the worker confirms it, no sooner than the delay after PAYING
    wait_for(lambda: status_of(order) == S.PAID, worker=celery_worker)
    moves = {t.to_status: t.at for t in OrderTransition.all_tenants.filter(order=order)}
    assert (moves[S.PAID] - moves[S.PAYING]).total_seconds() >= DELAY
