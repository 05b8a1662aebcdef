"""Money the provider took that no order wanted goes back to the diner, once.

A capture can arrive for an order that does not want it: after the order was cancelled
(``paid_after_cancel``: the diner cancelled while the bank was still charging the card, or
the provider confirmed a payment the cancel had voided), or after another payment had already
paid the order (``paid_twice``: paid again after a decline, and both went through). The
webhook records it as a ``ProviderConflict`` and, in the same transaction,
:func:`schedule_capture_refund` marks the payment an ``unwanted_capture`` and creates the
refund's step (``Compensation`` ``refund-capture:<payment>``); after commit it sends the task
that runs :func:`refund_unwanted_capture`. The refund:

- moves money at most once: the provider's refund carries ``refund-capture:<payment>`` as its
  idempotency key (a run killed after the money moved gets the first refund back), and what
  it changes (the payment REFUNDED, the conflict resolved as refunded by the platform) commits
  with the step's once-only gate (:mod:`ordering.background.steps`);
- never meets a cancel's refund: the cancel saga refunds the payment that paid the order
  (:func:`ordering.models.payments.payment_of_record`), never an unwanted capture;
- is retried with backoff, then dead-lettered for staff, like a step of the saga; a send the
  broker lost is sent again by :func:`resend_due_capture_refunds` (Celery beat);
- keeps staff's hands off while it runs: the conflict cannot be resolved by hand before the
  refund has failed for good, and resolving it then closes the step and its dead letter
  (:func:`hand_capture_refund_to_staff`), so no requeue refunds what staff settled.

An amount other than the order's (``amount_mismatch``), a success for an order in no state
to take one (``unexpected_state``) and an event under an event id the provider used before for
another (``event_id_reused``) stay with staff: the platform cannot tell what is owed.
Sales are not touched: an unwanted capture was never counted as a sale.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import CharField, Exists, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Cast, Concat, Now
from django.utils import timezone

from ordering.background import dispatch
from ordering.background.steps import begin_attempt, mark_done, step_failed
from ordering.models import Compensation, DeadLetter, Order, Payment, ProviderConflict
from ordering.payments.registry import get_provider
from tenants.write_fence import writable

logger = logging.getLogger(__name__)

ACTOR = "platform:capture-refund"
STEP = Compensation.Step.REFUND_CAPTURE
_ID_PREFIX = "refund-capture:"
# a pending refund untouched this much longer than the longest retry wait lost its message
_LOST_AFTER_SECONDS = 60.0


class CaptureRefundRunning(Exception):
    """The platform is refunding this capture; its conflict closes when the refund is done."""


class RefundOutcome(StrEnum):
    REFUNDED = "refunded"
    ALREADY_DONE = "already_done"
    DEAD_LETTERED = "dead_lettered"
    MISSING = "missing"


def capture_refund_id(payment_id: int) -> str:
    return f"{_ID_PREFIX}{payment_id}"


def schedule_capture_refund(*, order: Order, payment: Payment) -> None:
    """In the webhook's transaction, which recorded ``payment``'s capture as unwanted: mark the
    payment, create its refund step, and send the refund's task once that commits."""
    Payment.all_tenants.filter(pk=payment.pk).update(unwanted_capture=True)
    payment.unwanted_capture = True
    compensation_id = capture_refund_id(payment.pk)
    Compensation.all_tenants.create(
        compensation_id=compensation_id, tenant_id=order.tenant_id, order=order, step=STEP
    )

    # A function, not a functools.partial: Django's robust hook names what failed by its
    # __qualname__, which a partial lacks, so any failure escaped as an AttributeError.
    def send() -> None:
        _send(compensation_id)

    transaction.on_commit(send, robust=True)


def refund_unwanted_capture(*, compensation_id: str) -> RefundOutcome:
    """Run the refund step ``compensation_id``; safe to run any number of times, at once too.

    Raises :class:`ordering.background.steps.RetryLater` when the provider failed with
    retries left."""
    compensation = (
        Compensation.all_tenants.select_related("order__tenant")
        .filter(compensation_id=compensation_id, step=STEP)
        .first()
    )
    if compensation is None:
        return RefundOutcome.MISSING
    if compensation.status == Compensation.Status.DONE:
        return RefundOutcome.ALREADY_DONE
    if compensation.status == Compensation.Status.FAILED:
        return RefundOutcome.DEAD_LETTERED  # waits for staff: requeue, or resolve the conflict
    order = compensation.order
    payment = Payment.all_tenants.get(pk=int(compensation_id.removeprefix(_ID_PREFIX)))
    attempt = begin_attempt(compensation)
    try:
        refund = get_provider(payment.provider).refund(
            payment=payment, amount=payment.amount, idempotency_key=compensation_id
        )
    except Exception as exc:
        step_failed(  # raises RetryLater while retries are left
            order=order,
            compensation=compensation,
            attempt=attempt,
            exc=exc,
            task=dispatch.REFUND_UNWANTED_CAPTURE,
            payload={"args": [compensation_id], "order_id": str(order.pk)},
        )
        return RefundOutcome.DEAD_LETTERED
    result = {
        "refund_id": refund.refund_id,
        "amount": str(refund.amount),
        "replayed": refund.replayed,
    }
    with transaction.atomic():
        if not mark_done(compensation, result, acted=True):
            return RefundOutcome.ALREADY_DONE  # another run recorded it first
        Payment.all_tenants.filter(pk=payment.pk).update(
            status=Payment.Status.REFUNDED, updated_at=Now()
        )
        ProviderConflict.all_tenants.filter(
            payment=payment, kind__in=ProviderConflict.REFUNDED_BY_PLATFORM, resolved=False
        ).update(
            resolved=True,
            outcome=ProviderConflict.Outcome.REFUNDED,
            resolved_by=ACTOR,
            resolved_at=Now(),
            resolution_note=(
                f"Refunded by the platform: refund {refund.refund_id} of "
                f"{refund.amount} {payment.currency}."
            ),
        )
    logger.info(
        "order %s: unwanted capture %s refunded (%s)", order.pk, payment.pk, refund.refund_id
    )
    return RefundOutcome.REFUNDED


def resend_due_capture_refunds(*, batch: int = 200, now: datetime | None = None) -> int:
    """Send again the refunds still pending well past their last attempt's longest retry
    wait: their message was lost (the broker down at the send, or emptied since). How many
    were sent. Each is marked as sent now, so a queue that is merely slow gets one copy per
    wait, not one per run; a send the broker did not take is no send: the refund stays due
    for the next run, which goes on from it (this one stops there, as the outbox's sweep
    does, instead of marking the rest of the batch sent while sends are paused)."""
    cutoff = (now or timezone.now()) - timedelta(
        seconds=settings.SAGA_RETRY_MAX_SECONDS + _LOST_AFTER_SECONDS
    )
    due = list(
        Compensation.all_tenants.filter(
            writable(), step=STEP, status=Compensation.Status.PENDING, updated_at__lt=cutoff
        )
        .order_by("updated_at")
        .values_list("pk", "compensation_id", "updated_at")[:batch]
    )
    return dispatch.send_due_again(
        (((pk, compensation_id), last_touched) for pk, compensation_id, last_touched in due),
        still_due=lambda key: Compensation.all_tenants.filter(
            pk=key[0], status=Compensation.Status.PENDING
        ),
        send=lambda key: _send(key[1]),
    )


def refuse_while_refunding(*, payment_id: int) -> None:
    """:class:`CaptureRefundRunning` while the platform's refund of ``payment_id``'s capture is
    to run or running: staff resolving another conflict about that money (another amount the
    provider reported for it) wait for it, and then see the payment refunded."""
    if payment_id in refunds_running(payment_ids=[payment_id]):
        raise CaptureRefundRunning(f"the platform is refunding payment {payment_id}")


def hand_capture_refund_to_staff(*, payment_id: int, actor: str) -> None:
    """Staff resolve the conflict of an unwanted capture by hand: the platform's refund, if it
    failed for good, is closed (its dead letter discarded, its step done) in the caller's
    transaction, so no requeue refunds what staff settled. :class:`CaptureRefundRunning`
    while the platform's refund is still to run or running."""
    compensation_id = capture_refund_id(payment_id)
    # the letter first, then the step: the order a requeue takes them in, so the two never
    # wait on each other
    DeadLetter.objects.filter(key=compensation_id, state=DeadLetter.State.OPEN).update(
        state=DeadLetter.State.DISCARDED,
        resolved_at=Now(),
        resolved_by=actor[:150],
        note="the unwanted capture's conflict was resolved by staff",
    )
    closed = Compensation.all_tenants.filter(
        compensation_id=compensation_id, status=Compensation.Status.FAILED
    ).update(status=Compensation.Status.DONE, done_at=Now(), result={"settled_by": actor[:150]})
    if not closed:
        refuse_while_refunding(payment_id=payment_id)


def refunds_running(*, payment_ids: list[int]) -> set[int]:
    """Of ``payment_ids``, the payments the platform is refunding now (their refund to run,
    or running): not one whose refund failed for good and waits for staff, nor a conflict
    recorded before the platform refunded such money (it has no refund step)."""
    running = Compensation.all_tenants.filter(
        compensation_id__in=[capture_refund_id(pk) for pk in payment_ids],
        status=Compensation.Status.PENDING,
    ).values_list("compensation_id", flat=True)
    return {int(compensation_id.removeprefix(_ID_PREFIX)) for compensation_id in running}


def refund_step_status(payment_id: OuterRef) -> Subquery:
    """The status of the platform's refund of the payment ``payment_id`` refers to (pending:
    to run or running; failed: for good, its dead letter waits for staff; done; None: the
    platform refunds none of it), as an expression: a list of conflicts reads it in its own
    query, through the step's unique index, instead of once a row."""
    compensation_id = Concat(Value(_ID_PREFIX), Cast(payment_id, output_field=CharField()))
    return Subquery(
        Compensation.all_tenants.filter(compensation_id=compensation_id).values("status")[:1]
    )


def waiting_for_staff(conflicts: QuerySet[ProviderConflict]) -> QuerySet[ProviderConflict]:
    """The open ones of ``conflicts`` staff must resolve: all but those whose money the
    platform is refunding (its refund step pending: a Resolve is refused meanwhile). What
    ``ordering_provider_conflicts_waiting`` counts and the admin's "waiting for staff" lists,
    so the alert's count is the list staff open."""
    compensation_id = Concat(Value(_ID_PREFIX), Cast(OuterRef("payment_id"), CharField()))
    refunding = Compensation.all_tenants.filter(
        compensation_id=compensation_id, status=Compensation.Status.PENDING
    )
    return conflicts.filter(resolved=False).exclude(Exists(refunding))


def _send(compensation_id: str) -> int:
    try:
        dispatch.enqueue(dispatch.REFUND_UNWANTED_CAPTURE, compensation_id)
    except Exception as exc:  # the broker is down: the step is in the database
        logger.warning(
            "refund %s not sent now (%s); the resend sweep sends it again", compensation_id, exc
        )
        return 0
    return 1
