"""One compensation step, applied at most once however often it runs.

Shared by the cancel saga (:mod:`ordering.background.saga`) and the refund of money the
provider took that no order wanted (:mod:`ordering.payments.capture_refunds`). A step has a
``Compensation`` row, unique by its ``compensation_id``; its effect is committed together with
:func:`mark_done`'s conditional ``UPDATE … WHERE status = 'pending'``, so of two runs (a
redelivery racing a retry) exactly one applies it. An external call (a refund, a courier's
cancel) carries the ``compensation_id`` as its idempotency key: a run killed after the provider
acted, before it recorded that, calls again and gets the first result back.

Attempts are counted in the row (a worker killed mid-step counts too). A step that raised is
retried with exponential backoff and jitter (``SAGA_RETRY_BASE_SECONDS`` x 2^(attempt-1),
capped at ``SAGA_RETRY_MAX_SECONDS``) at most ``SAGA_MAX_RETRIES`` times after the first
attempt; then the row is marked failed and a ``DeadLetter`` is written for staff, who requeue
(``ordering.background.dead_letters.requeue_dead_letter``: the row pending again, fresh
retries) or discard it.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F
from django.db.models.functions import Now

from config.database_unavailable import is_database_unavailable
from ordering.background.dead_letters import record_dead_letter
from ordering.models import Compensation, DeadLetter, Order

logger = logging.getLogger(__name__)


class RetryLater(Exception):
    """A step failed and has retries left: run it again in ``countdown`` seconds."""

    def __init__(self, *, step: str, attempt: int, countdown: float, error: str) -> None:
        super().__init__(f"{step} failed (attempt {attempt}), retry in {countdown:.2f} s: {error}")
        self.step = step
        self.attempt = attempt
        self.countdown = countdown


def backoff_seconds(attempt: int) -> float:
    """Delay before retry number ``attempt`` (1-based): exponential, capped, "equal jitter"
    (half fixed, half random), so retries of many steps failing together spread out."""
    ceiling = min(
        settings.SAGA_RETRY_MAX_SECONDS, settings.SAGA_RETRY_BASE_SECONDS * 2 ** (attempt - 1)
    )
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def compensation_for(*, order: Order, step: str, compensation_id: str) -> Compensation:
    """The step's row, created pending the first time it is asked for."""
    compensation, _ = Compensation.all_tenants.get_or_create(
        compensation_id=compensation_id,
        defaults={"tenant_id": order.tenant_id, "order": order, "step": step},
    )
    return compensation


def begin_attempt(compensation: Compensation) -> int:
    """Count one more attempt of a pending step (and when it began); the attempt's number."""
    Compensation.all_tenants.filter(pk=compensation.pk, status=Compensation.Status.PENDING).update(
        attempts=F("attempts") + 1, updated_at=Now()
    )
    compensation.refresh_from_db(fields=["attempts"])
    return compensation.attempts


def mark_done(
    compensation: Compensation, result: dict | None = None, *, acted: bool = False
) -> bool:
    """The step's once-only gate; call it in the transaction that applies the step's effect
    and apply the effect only if it returns True.

    ``acted``: an external call of the step went through (the provider refunded). That is
    recorded even when another run of the step, failing its last attempt meanwhile, marked
    the step failed and dead-lettered it: the money moved all the same, and a step left
    failed would send staff to move it again by hand. Its open letter is closed then."""
    statuses = [Compensation.Status.PENDING]
    if acted:
        statuses.append(Compensation.Status.FAILED)
    done = bool(
        Compensation.all_tenants.filter(pk=compensation.pk, status__in=statuses).update(
            status=Compensation.Status.DONE, done_at=Now(), result=result or {}, last_error=""
        )
    )
    if done and acted:
        _close_open_letters(compensation)
    return done


def _close_open_letters(compensation: Compensation) -> None:
    """Close the letters of a step another run dead-lettered, now that it is done. Read after
    the step's update, so a letter filed while that waited on the failing run is closed too;
    a letter staff are requeueing or discarding at this instant is locked by them and left
    to them (skipped, never waited for: they take the letter, then the step, which this
    transaction holds)."""
    open_letters = DeadLetter.objects.filter(
        key=compensation.compensation_id, state=DeadLetter.State.OPEN
    ).select_for_update(skip_locked=True)
    DeadLetter.objects.filter(pk__in=list(open_letters.values_list("pk", flat=True))).update(
        state=DeadLetter.State.DISCARDED,
        resolved_at=Now(),
        resolved_by="platform:step",
        note="another run of the step went through",
    )


def _give_back_attempt(compensation: Compensation) -> None:
    """Uncount the attempt an outage ended; while the database is still gone it stays counted,
    as a killed worker's does."""
    try:
        Compensation.all_tenants.filter(
            pk=compensation.pk, status=Compensation.Status.PENDING, attempts__gt=0
        ).update(attempts=F("attempts") - 1)
    except DatabaseError as exc:
        logger.warning("%s: the attempt an outage ended stays counted (%s)", compensation, exc)


def step_failed(
    *,
    order: Order,
    compensation: Compensation,
    attempt: int,
    exc: Exception,
    task: str,
    payload: dict[str, Any],
) -> None:
    """Attempt ``attempt`` of the step raised ``exc``: :class:`RetryLater` while retries are
    left; after the last, the step is failed and dead-lettered (``task`` with ``payload`` is
    what a requeue sends again) and this returns.

    An unreachable database (down, or ending the worker's session: a restart, a failover) is
    no failure of the step: ``exc`` is raised again for its task (the saga's retries it for as
    long as the outage lasts, ADR 0007; a capture refund's step stays pending for its resend
    sweep), and the attempt is given back when the database takes it.
    Counted, a few seconds of outage spent the step's retries and left the order to staff."""
    if is_database_unavailable(exc):
        _give_back_attempt(compensation)
        raise exc
    error = f"{type(exc).__name__}: {exc}"[:2000]
    if attempt <= settings.SAGA_MAX_RETRIES:
        Compensation.all_tenants.filter(pk=compensation.pk).update(last_error=error)
        countdown = backoff_seconds(attempt)
        logger.warning(
            "order %s: %s failed (attempt %d), retry in %.2f s: %s",
            order.pk,
            compensation.step,
            attempt,
            countdown,
            error,
        )
        raise RetryLater(step=compensation.step, attempt=attempt, countdown=countdown, error=error)
    with transaction.atomic():
        if Compensation.all_tenants.filter(
            pk=compensation.pk, status=Compensation.Status.PENDING
        ).update(status=Compensation.Status.FAILED, last_error=error):
            record_dead_letter(
                key=compensation.compensation_id,
                task=task,
                payload=payload,
                error=error,
                attempts=attempt,
                tenant=order.tenant,
                order=order,
            )
    logger.error(
        "order %s: %s failed %d times; dead-lettered for staff",
        order.pk,
        compensation.step,
        attempt,
    )
