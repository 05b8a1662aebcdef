"""The platform's refund of a capture reported after its restaurant left: once, retried.

The same guarantees as the refund of an unwanted capture (:mod:`ordering.payments.
capture_refunds`), kept on the :class:`~ordering.models.DepartedPayment` row instead of a
``Compensation`` (whose foreign keys to the restaurant and order are fenced and deleted with
them):

- money moves at most once: the provider's refund carries the row's ``refund_key``
  (``refund-departed:<provider>:<txn>``), so a run killed after the money moved gets the
  first refund back; and the row's conditional update from ``pending`` to ``done`` decides
  which of two runs records it;
- it goes through the adapter's ``refund`` with a ``Payment`` not saved whose tenant is None:
  the platform's own account (the simulated provider books it there);
- a failure is retried with the saga's backoff (``SAGA_MAX_RETRIES``), then dead-lettered for
  staff (a letter with no restaurant: its payload names it); a requeue runs it again, a
  discard marks it settled by staff (:mod:`ordering.background.dead_letters`);
- a send the broker lost is sent again by :func:`resend_due_departed_refunds` (the beat task
  of the capture refunds' resends).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from config.database_unavailable import is_database_unavailable
from ordering.background import dispatch
from ordering.background.dead_letters import record_dead_letter
from ordering.background.steps import RetryLater, backoff_seconds
from ordering.models import DeadLetter, DepartedPayment, Payment
from ordering.payments.registry import get_provider

logger = logging.getLogger(__name__)

ACTOR = "platform:departed-refund"
Refund = DepartedPayment.Refund
# a pending refund untouched this much longer than the longest retry wait lost its message
_LOST_AFTER_SECONDS = 60.0


class RefundOutcome(StrEnum):
    REFUNDED = "refunded"
    ALREADY_DONE = "already_done"
    DEAD_LETTERED = "dead_lettered"
    MISSING = "missing"


def schedule_departed_refund(*, departed_id: int) -> None:
    """Send the refund's task once the caller's transaction (which recorded the capture)
    commits; a send the broker refuses is left to the resend sweep."""

    def send() -> None:
        _send(departed_id)

    transaction.on_commit(send, robust=True)


def refund_departed_capture(*, departed_id: int) -> RefundOutcome:
    """Run the refund of the row ``departed_id``; safe to run any number of times, at once
    too. :class:`RetryLater` when the provider failed with retries left."""
    row = DepartedPayment.objects.filter(pk=departed_id).first()
    if row is None or row.refund == Refund.NONE:
        return RefundOutcome.MISSING
    if row.refund in (Refund.DONE, Refund.SETTLED):
        return RefundOutcome.ALREADY_DONE
    if row.refund == Refund.FAILED:
        return RefundOutcome.DEAD_LETTERED  # waits for staff: requeue, or discard
    attempt = _begin_attempt(row)
    # the platform's account (tenant None): the restaurant's rows are fenced or gone
    payment = Payment(
        tenant_id=None,
        order_id=row.order_ref,
        provider=row.provider,
        provider_txn_id=row.provider_txn_id,
        amount=row.captured_amount,
        currency=row.captured_currency,
    )
    try:
        refund = get_provider(row.provider).refund(
            payment=payment, amount=row.captured_amount, idempotency_key=row.refund_key
        )
    except Exception as exc:
        _failed(row, attempt=attempt, exc=exc)  # raises while retries are left
        return RefundOutcome.DEAD_LETTERED
    result = {
        "refund_id": refund.refund_id,
        "amount": str(refund.amount),
        "replayed": refund.replayed,
    }
    with transaction.atomic():
        # a run that failed its last attempt meanwhile filed a letter: the money moved all
        # the same, so it is recorded, and the letter closed
        if not DepartedPayment.objects.filter(
            pk=row.pk, refund__in=[Refund.PENDING, Refund.FAILED]
        ).update(
            refund=Refund.DONE,
            refund_result=result,
            refund_last_error="",
            refunded_at=Now(),
            updated_at=Now(),
        ):
            return RefundOutcome.ALREADY_DONE
        _close_open_letter(row)
    # (the row's text names its restaurant: "<provider>:<txn> of <slug>")
    logger.info("payment %s refunded by the platform (%s)", row, result)
    return RefundOutcome.REFUNDED


def resend_due_departed_refunds(*, batch: int = 200, now: datetime | None = None) -> int:
    """Send again the refunds still pending well past their last attempt's longest retry
    wait (their message was lost); how many were sent. Each is marked as sent now, so a queue
    that is merely slow gets one copy per wait; a send the broker did not take is no send:
    the refund stays due for the next run, which goes on from it (this one stops there, as
    the capture refunds' and the outbox's sweeps do, instead of marking the rest of the batch
    sent while sends are paused)."""
    cutoff = (now or timezone.now()) - timedelta(
        seconds=settings.SAGA_RETRY_MAX_SECONDS + _LOST_AFTER_SECONDS
    )
    due = list(
        DepartedPayment.objects.filter(refund=Refund.PENDING, updated_at__lt=cutoff)
        .order_by("updated_at")
        .values_list("pk", "updated_at")[:batch]
    )
    return dispatch.send_due_again(
        due,
        still_due=lambda pk: DepartedPayment.objects.filter(pk=pk, refund=Refund.PENDING),
        send=_send,
    )


def _begin_attempt(row: DepartedPayment) -> int:
    DepartedPayment.objects.filter(pk=row.pk, refund=Refund.PENDING).update(
        refund_attempts=F("refund_attempts") + 1, updated_at=Now()
    )
    row.refresh_from_db(fields=["refund_attempts"])
    return row.refund_attempts


def _failed(row: DepartedPayment, *, attempt: int, exc: Exception) -> None:
    """:class:`RetryLater` while retries are left; after the last, the refund is failed and
    dead-lettered. An unreachable database is no failure of the refund: raised again, the
    attempt given back (the resend sweep sends it again), as the saga's steps do."""
    if is_database_unavailable(exc):
        DepartedPayment.objects.filter(
            pk=row.pk, refund=Refund.PENDING, refund_attempts__gt=0
        ).update(refund_attempts=F("refund_attempts") - 1)
        raise exc
    error = f"{type(exc).__name__}: {exc}"[:2000]
    if attempt <= settings.SAGA_MAX_RETRIES:
        DepartedPayment.objects.filter(pk=row.pk).update(refund_last_error=error)
        countdown = backoff_seconds(attempt)
        logger.warning(
            "%s: refund failed (attempt %d), retry in %.2f s: %s", row, attempt, countdown, error
        )
        raise RetryLater(step="refund_capture", attempt=attempt, countdown=countdown, error=error)
    with transaction.atomic():
        if DepartedPayment.objects.filter(pk=row.pk, refund=Refund.PENDING).update(
            refund=Refund.FAILED, refund_last_error=error, updated_at=Now()
        ):
            record_dead_letter(
                key=row.letter_key,
                task=dispatch.REFUND_DEPARTED_CAPTURE,
                payload={
                    "args": [row.pk],
                    "restaurant": row.tenant_slug,
                    "order_id": str(row.order_ref),
                    "provider_txn_id": row.provider_txn_id,
                },
                error=error,
                attempts=attempt,
            )
    logger.error("%s: refund failed %d times; dead-lettered", row, attempt)


def _close_open_letter(row: DepartedPayment) -> None:
    """Close the letter of a run that failed its last attempt while this one refunded; one
    staff are requeueing or discarding at this instant is left to them (skipped, not
    waited for)."""
    letters = DeadLetter.objects.filter(
        key=row.letter_key, state=DeadLetter.State.OPEN
    ).select_for_update(skip_locked=True)
    DeadLetter.objects.filter(pk__in=list(letters.values_list("pk", flat=True))).update(
        state=DeadLetter.State.DISCARDED,
        resolved_at=Now(),
        resolved_by=ACTOR,
        note="another run of the refund went through",
    )


def _send(departed_id: int) -> int:
    try:
        dispatch.enqueue(dispatch.REFUND_DEPARTED_CAPTURE, departed_id)
    except Exception as exc:  # the broker is down: the refund is pending in the database
        logger.warning("refund of departed payment %s not sent now (%s)", departed_id, exc)
        return 0
    return 1
