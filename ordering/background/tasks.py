"""Celery entry points of the ordering domain. Each is thin — it calls one service — and safe
to run twice, because the broker may deliver any message twice (``config/celery.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import Task, shared_task
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from config.database_unavailable import is_database_unavailable
from ordering.background import consumers, dispatch, outbox
from ordering.background.dead_letters import record_dead_letter
from ordering.background.steps import RetryLater, backoff_seconds
from ordering.models import OutboxEvent
from tenants.write_fence import refused_by_fence

logger = logging.getLogger(__name__)


@shared_task(bind=True, name=dispatch.HANDLE_OUTBOX_EVENT, max_retries=None)
def handle_outbox_event(self: Task, event_id: int) -> str:
    """Consume one outbox event (order paid, cancel requested).

    A saga step that failed with retries left comes back as :class:`RetryLater` (the saga
    counts its attempts). Any other error is retried here with the same backoff and limit, then
    dead-lettered — so no failure ends with a message silently acknowledged and dropped. An
    unreachable database is no limit's business: retried for as long as the outage lasts (the
    wait capped at ``SAGA_RETRY_MAX_SECONDS``), instead of ending, attempts spent, in the
    sweeper's resend 10 minutes on (or in a dead letter, had the database come back just then).
    """
    try:
        result = consumers.handle_event(event_id=event_id)
        # whatever came of it: done with. Inside the try: an outage here is retried like one
        # during the work (the retry finds the work done), not left to the sweeper's resend.
        outbox.mark_consumed(event_id=event_id)
    except RetryLater as exc:
        _expect_retry(event_id, exc.countdown)
        raise self.retry(countdown=exc.countdown, exc=exc) from None
    except Exception as exc:
        if refused_by_fence(exc):
            # Its restaurant is being offboarded: its rows can no longer be written, so no
            # retry could consume it, and its offboarding deletes it with the rest (the
            # export holds it as it stands). Not an error to retry, dead-letter or log as one.
            logger.info("outbox event %s left to its restaurant's offboarding", event_id)
            return consumers.ConsumeResult.TENANT_LEAVING
        attempt = self.request.retries + 1
        if attempt <= settings.SAGA_MAX_RETRIES or is_database_unavailable(exc):
            if is_database_unavailable(exc):
                close_old_connections()  # a session the outage ended is not the retry's
            countdown = backoff_seconds(attempt)
            _expect_retry(event_id, countdown)
            raise self.retry(countdown=countdown, exc=exc) from None
        outbox.mark_consumed(event_id=event_id)
        # the letter names the event's order, which its page and the admin then flag
        about = (
            OutboxEvent.all_tenants.select_related("tenant", "order").filter(pk=event_id).first()
        )
        record_dead_letter(
            key=f"task:{self.name}:{event_id}",
            task=self.name,
            payload={"args": [event_id]},
            error=f"{type(exc).__name__}: {exc}"[:2000],
            attempts=attempt,
            tenant=about.tenant if about else None,
            order=about.order if about else None,
        )
        logger.exception("outbox event %s dead-lettered after %d attempts", event_id, attempt)
        return consumers.ConsumeResult.DEAD_LETTERED
    return result


def _expect_retry(event_id: int, countdown: float) -> None:
    """Tell the outbox a retry is on its way, when the database can be told. An unreachable
    database is often why the event failed: the failed bookkeeping ended the task without its
    retry, and the event waited for the sweeper's resend (``OUTBOX_REDELIVER_AFTER_SECONDS``,
    10 minutes) after a blip of seconds. The retry is sent all the same; should the sweeper
    also send the event meanwhile, its consumer absorbs the duplicate."""
    try:
        outbox.expect_retry(event_id=event_id, countdown=countdown)
    except DatabaseError as exc:
        logger.warning("outbox event %s: retry sent unrecorded (%s)", event_id, exc)


# Steps of an offboarding job one message runs before it sends the next: each message stays
# far shorter than the broker's visibility timeout, so it is never delivered twice for being slow.
OFFBOARDING_STEPS_PER_TASK = 20
# Seconds before an offboarding waiting for its restaurant's money to settle looks again
MONEY_RECHECK_SECONDS = 60


@shared_task(name=dispatch.OFFBOARD_TENANT)
def offboard_tenant(job_id: int) -> str:
    """Advance an offboarding job by a few bounded steps, then send itself again until the
    job is done. A duplicate delivery is harmless: runners take turns on the job's row lock and
    every step deletes only what is still there."""
    from ordering.privacy.offboarding import run_offboarding, waits_for_money

    job = run_offboarding(job_id, max_steps=OFFBOARDING_STEPS_PER_TASK)
    if not job.is_done:
        # while the restaurant's money still moves, look again a minute later, not at once
        dispatch.enqueue(
            dispatch.OFFBOARD_TENANT,
            job_id,
            countdown=MONEY_RECHECK_SECONDS if waits_for_money(job) else None,
        )
    return job.phase


@shared_task(name="ordering.resume_stalled_offboardings")
def resume_stalled_offboardings() -> int:
    """Send again the offboarding jobs whose next message was lost (beat); a job's runners take
    turns on its row, so one sent while its own message still ran only waits its turn."""
    from ordering.privacy.offboarding import stalled_jobs

    resumed = 0
    for job_id in stalled_jobs():
        try:
            dispatch.enqueue(dispatch.OFFBOARD_TENANT, job_id)
        except Exception as exc:  # the broker is down: the next sweep tries again
            logger.warning("offboarding job %s not resumed: %s", job_id, exc)
            break
        resumed += 1
    return resumed


@shared_task(name=dispatch.SWEEP_OUTBOX)
def sweep_outbox() -> int:
    """Publish outbox rows whose on-commit publish was lost (Celery beat runs this)."""
    return outbox.sweep_outbox()


@shared_task(name="ordering.reclaim_stale_leases")
def reclaim_stale_leases() -> dict[str, int]:
    """Free leases of processes that stopped heartbeating (beat, and every worker start)."""
    from ordering.instances import reclaim_stale_leases as reclaim

    return reclaim().as_dict()


@shared_task(name="ordering.drain_idempotency_audits")
def drain_idempotency_audits() -> int:
    """Copy the engine's audit streams into the database (beat). Safe to run twice or at once
    on two workers: each node's cursor row decides (idempotency/stores/audit_stream.py)."""
    from idempotency.stores.audit_stream import drain_audits

    return drain_audits()


@shared_task(name="ordering.reconcile_payments")
def reconcile_payments() -> dict[str, int]:
    """Ask providers about payments whose callback has not come (beat). Two runs at once ask
    twice; what they apply goes through the inbox, so an order is paid once."""
    from ordering.payments.reconciliation import reconcile_payments as reconcile

    return reconcile()


@shared_task(bind=True, name=dispatch.REFUND_UNWANTED_CAPTURE, max_retries=None)
def refund_unwanted_capture(self: Task, compensation_id: str) -> str:
    """Give back money the provider took that no order wanted. A provider failure with
    retries left comes back as :class:`RetryLater` (the step counts its attempts); after the
    last, the step is dead-lettered. An unreachable database is retried, as long as it lasts
    and spending no attempt of the step, as :func:`handle_outbox_event` retries it. Anything
    else raised leaves the step pending, for the resend sweep."""
    from ordering.payments.capture_refunds import refund_unwanted_capture as refund

    return _refund_retried(self, lambda: refund(compensation_id=compensation_id))


@shared_task(bind=True, name=dispatch.REFUND_DEPARTED_CAPTURE, max_retries=None)
def refund_departed_capture(self: Task, departed_id: int) -> str:
    """Give back money the provider took after its restaurant left, retried as
    :func:`refund_unwanted_capture` is."""
    from ordering.payments.departed_refunds import refund_departed_capture as refund

    return _refund_retried(self, lambda: refund(departed_id=departed_id))


def _refund_retried(task: Task, refund: Callable[[], str]) -> str:
    """``refund()``, the task retried when the provider failed with retries left
    (:class:`RetryLater`) or the database was unreachable (spending no attempt of the step)."""
    try:
        return refund()
    except RetryLater as exc:
        raise task.retry(countdown=exc.countdown, exc=exc) from None
    except DatabaseError as exc:
        if not is_database_unavailable(exc):
            raise
        countdown = backoff_seconds(task.request.retries + 1)
        raise task.retry(countdown=countdown, exc=exc) from None


@shared_task(name="ordering.resend_capture_refunds")
def resend_capture_refunds() -> int:
    """Send again the refunds of unwanted captures, and of captures after their restaurant
    left, whose message was lost (beat)."""
    from ordering.payments.capture_refunds import resend_due_capture_refunds
    from ordering.payments.departed_refunds import resend_due_departed_refunds

    return resend_due_capture_refunds() + resend_due_departed_refunds()


@shared_task(name="ordering.expire_unpaid_orders")
def expire_unpaid_orders() -> int:
    """Give back the portions of orders left unpaid (beat). Two runs at once expire each
    order once: the move out of CREATED is a conditional update."""
    from ordering.expiry import expire_unpaid_orders as expire

    return expire()


@shared_task(bind=True, name=dispatch.COMPLETE_SIMULATED_PAYMENT, max_retries=3)
def complete_simulated_payment(self: Task, provider_name: str, provider_txn_id: str) -> str:
    """Demo only: the simulated provider confirms a payment through the signed webhook."""
    from ordering.payments.simulated import complete_payment

    return complete_payment(provider_name=provider_name, provider_txn_id=provider_txn_id).outcome
