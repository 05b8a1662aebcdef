"""The cancel saga (seed 4.4, ch. 5): undo a paid order step by step, each step at most once.

``cancel_order`` moves a paid order to CANCELLING and writes ``order.cancel_requested`` to the
outbox in the same transaction; the event's consumer runs :func:`run_cancel_saga`:

    restore stock -> return coupon -> cancel delivery -> refund payment -> CANCELLED

Why each step happens at most once, whoever runs the saga how often:

- every step has a ``Compensation`` row keyed by ``compensation_id = cancel:<order>:<step>``
  (unique); the step's effect is committed together with the conditional
  ``UPDATE compensation SET status = 'done' WHERE status = 'pending'``, so of two runs (a
  redelivery racing a retry) exactly one applies it;
- external steps (delivery, refund) cannot share our transaction, so the call carries the
  ``compensation_id`` as its idempotency key: a worker killed after the provider acted but
  before it recorded that calls again on redelivery and gets the first result back, no second
  refund. External calls are made outside any transaction (no locks held across the network).

Failures: a step that raises is retried with backoff, then dead-lettered
(:mod:`ordering.background.steps`); the order stays CANCELLING, flagged by the open dead letter,
until staff requeue it (fresh retries from the failed step) or discard it.

When every step is done, the conditional FSM move ``finish_cancel`` makes the order CANCELLED
and the event is recorded as processed, in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from django.db import transaction
from django.utils import timezone

from ordering.background.inbox import is_processed, record_processed
from ordering.background.sales import count_refund
from ordering.background.steps import (
    begin_attempt,
    compensation_for,
    mark_done,
    step_failed,
)
from ordering.delivery import delivery_adapter
from ordering.models import Compensation, Order, OrderStatus, OutboxEvent, Payment
from ordering.models.payments import payment_of_record
from ordering.payments.registry import get_provider
from ordering.services.lifecycle import apply_transition, return_coupon, return_stock

logger = logging.getLogger(__name__)

Step = Compensation.Step
STEPS: tuple[str, ...] = (
    Step.RESTORE_STOCK,
    Step.RETURN_COUPON,
    Step.CANCEL_DELIVERY,
    Step.REFUND_PAYMENT,
)
SAGA_TASK = "ordering.handle_outbox_event"
ACTOR = "saga:cancel"


class SagaOutcome(StrEnum):
    COMPLETED = "completed"
    ALREADY_DONE = "already_done"
    DEAD_LETTERED = "dead_lettered"
    NOT_CANCELLING = "not_cancelling"


def compensation_id_for(*, order_id: int, step: str) -> str:
    return f"cancel:{order_id}:{step}"


def run_cancel_saga(*, event: OutboxEvent) -> SagaOutcome:
    """Run (or resume) the cancel saga of ``event``'s order; safe to call any number of times.

    Raises :class:`ordering.background.steps.RetryLater` when a step failed with retries left.
    """
    if is_processed(event):
        with transaction.atomic():
            record_processed(event)  # counts the duplicate
        return SagaOutcome.ALREADY_DONE
    order = Order.all_tenants.select_related("tenant").get(pk=event.order_id)
    if order.status not in (OrderStatus.CANCELLING, OrderStatus.CANCELLED):
        logger.error("cancel saga for order %s, which is %s: skipped", order.pk, order.status)
        return SagaOutcome.NOT_CANCELLING
    for step in STEPS:
        compensation = compensation_for(
            order=order,
            step=step,
            compensation_id=compensation_id_for(order_id=order.pk, step=step),
        )
        if compensation.status == Compensation.Status.DONE:
            continue
        if compensation.status == Compensation.Status.FAILED:
            return SagaOutcome.DEAD_LETTERED  # waits for staff: requeue or discard
        attempt = begin_attempt(compensation)
        try:
            STEP_RUNNERS[step](order, compensation)
        except Exception as exc:
            step_failed(  # raises RetryLater while retries are left
                order=order,
                compensation=compensation,
                attempt=attempt,
                exc=exc,
                task=SAGA_TASK,
                payload={"args": [event.pk], "step": step, "order_id": str(order.pk)},
            )
            return SagaOutcome.DEAD_LETTERED
        compensation.refresh_from_db(fields=["status"])
        if compensation.status != Compensation.Status.DONE:
            # another run failed the step for good after this one read it pending: the order
            # is not cancelled past it (its letter's requeue runs the saga from here)
            return SagaOutcome.DEAD_LETTERED
    _finish(event=event, order=order)
    return SagaOutcome.COMPLETED


def _restore_stock(order: Order, compensation: Compensation) -> None:
    with transaction.atomic():
        if mark_done(compensation):
            return_stock(order)


def _return_coupon(order: Order, compensation: Compensation) -> None:
    with transaction.atomic():
        if mark_done(compensation, {"coupon_id": order.coupon_id}):
            return_coupon(order)


def _cancel_delivery(order: Order, compensation: Compensation) -> None:
    cancellation = delivery_adapter().cancel_delivery(
        order=order, idempotency_key=compensation.compensation_id
    )
    with transaction.atomic():
        mark_done(
            compensation,
            {"reference": cancellation.reference, "replayed": cancellation.replayed},
            acted=True,
        )


def _refund_payment(order: Order, compensation: Compensation) -> None:
    """Refund the payment that took the money; void one never captured; nothing if there is
    none, as for an order that cost nothing (paid without a payment), nor for a payment of
    0.00: providers refuse a refund of nothing, and no refund is booked in the day's sales."""
    P = Payment.Status
    # money no order wanted has a refund of its own (ordering/payments/capture_refunds.py)
    payment = payment_of_record(
        list(
            Payment.all_tenants.filter(order=order, unwanted_capture=False).order_by("-created_at")
        )
    )
    if payment is not None and payment.status in (P.SUCCEEDED, P.REFUNDED) and payment.amount > 0:
        refund = get_provider(payment.provider).refund(
            payment=payment, amount=payment.amount, idempotency_key=compensation.compensation_id
        )
        with transaction.atomic():
            result = {
                "refund_id": refund.refund_id,
                "amount": str(refund.amount),
                "replayed": refund.replayed,
            }
            if mark_done(compensation, result, acted=True):
                Payment.all_tenants.filter(pk=payment.pk, status=P.SUCCEEDED).update(
                    status=P.REFUNDED
                )
                count_refund(
                    tenant=order.tenant,
                    at=timezone.now(),
                    currency=payment.currency,
                    amount=refund.amount,
                )
        return
    with transaction.atomic():
        if mark_done(compensation, {"refund_id": None}) and payment is not None:
            Payment.all_tenants.filter(pk=payment.pk, status=P.PENDING).update(status=P.VOIDED)


STEP_RUNNERS: dict[str, Callable[[Order, Compensation], None]] = {
    Step.RESTORE_STOCK: _restore_stock,
    Step.RETURN_COUPON: _return_coupon,
    Step.CANCEL_DELIVERY: _cancel_delivery,
    Step.REFUND_PAYMENT: _refund_payment,
}


def _finish(*, event: OutboxEvent, order: Order) -> None:
    with transaction.atomic():
        tenant = order.tenant
        order = Order.all_tenants.select_for_update(of=("self",)).get(pk=order.pk)
        order.tenant = tenant
        if order.status == OrderStatus.CANCELLING:
            apply_transition(order, order.finish_cancel, actor=ACTOR)
        record_processed(event)
