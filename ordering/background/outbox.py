"""The transactional outbox: write an event with the state change, publish it after commit.

Why not send the Celery message from the service directly: a message sent before the commit can
be consumed before the row it names is visible (or exist for a change that then rolled back),
and one sent after the commit is lost if the process dies in between. So the event is a row in
the same transaction as the change (:func:`emit_event`); ``transaction.on_commit`` publishes it
right after the commit (:func:`publish_event`), and :func:`sweep_outbox`, run periodically by
Celery beat (``ordering.sweep_outbox``) or ``manage.py sweep_outbox``, publishes rows whose
publish was lost. A row can therefore be published twice (sweeper and a slow on-commit publish
racing); consumers make that harmless (:mod:`ordering.background.consumers`).

A message the broker accepted can still be lost: the broker is Redis, and a Redis restarted
without its data (or flushed) drops the queue. So the consumer marks the row consumed when it is
done with it (:func:`mark_consumed`), and the sweeper sends a row published but not consumed
again once ``OUTBOX_REDELIVER_AFTER_SECONDS`` (600) have passed since its last send, doubling
the wait after each send (at most a day), so that a queue merely waiting for a worker is not
flooded with copies. Each send writes when the next one is due (``resend_at``, on the
database's clock, by which the sweep reads it), so the sweep reads only rows already due,
soonest first, however many wait in a long backoff. A retry the consumer asked for counts its
wait from when that retry is due (:func:`expect_retry`): the broker holds it until then. The
cancel of a paid order whose message Redis lost is refunded all the same, once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, connections, router, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from ordering.background import dispatch
from ordering.models import EventType, Order, OrderTransition, OutboxEvent
from ordering.one_statement import Leading, insert_together
from tenants.write_fence import writable

logger = logging.getLogger(__name__)


def emit_event(
    *, order: Order, event_type: EventType, payload: dict[str, Any] | None = None
) -> OutboxEvent:
    """Record ``event_type`` for ``order`` in the caller's transaction; publish after commit.

    Must be called inside ``transaction.atomic()``, after the state change it announces: the
    event's version is the order's number of transitions, so it identifies the change it
    announces, and a rolled-back change takes its event with it. The transitions are counted
    by the event's own ``INSERT`` (one statement, its text compiled once per process: see
    :mod:`ordering.one_statement`), where a count of its own and the ORM's insert
    took two round trips and two queries built afresh.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("emit_event must run inside the transaction of the state change")
    counted = Leading(
        sql=_transitions_count_sql(router.db_for_write(OutboxEvent)), params=[order.pk]
    )
    event = OutboxEvent(
        tenant=order.tenant,
        order=order,
        event_type=event_type,
        version=counted.placeholder,
        payload=payload or {},
    )
    insert_together([event], leading=counted)
    event_id = event.pk

    # A function, not a functools.partial: Django's robust hook names what failed by its
    # __qualname__, which a partial lacks, so the failure escaped as an AttributeError.
    def publish() -> None:
        publish_event(event_id=event_id)

    transaction.on_commit(publish, robust=True)
    return event


@cache
def _transitions_count_sql(using: str) -> str:
    """``SELECT COUNT(*)`` of an order's transitions (the order's key its parameter), quoted
    for database ``using``; built once per database."""
    quote = connections[using].ops.quote_name
    opts = OrderTransition._meta
    order_column = opts.get_field("order").column
    return f"SELECT COUNT(*) FROM {quote(opts.db_table)} WHERE {quote(order_column)} = %s"


def publish_event(*, event_id: int) -> bool:
    """Send the event to the consumers' queue and mark it published; False if sending failed.

    Never raises: a failed publish leaves the row unpublished for the sweeper. It runs after
    the commit of the change, inside the request that made it: the database lost then (a
    restart, a failover ending the session) must not turn a change that happened into an
    error answer. A send whose row could not be marked is sent again by the sweeper, and its
    consumer absorbs the copy.
    """
    try:
        dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, event_id)
    except dispatch.BrokerUnavailable:
        # not tried: the row stays as it is, its attempts counting sends only
        logger.info("outbox event %s left to the sweeper: the broker failed just now", event_id)
        return False
    except Exception as exc:
        logger.warning("outbox event %s not published (the sweeper retries): %s", event_id, exc)
        _record_send(
            event_id,
            publish_attempts=F("publish_attempts") + 1,
            last_publish_at=Now(),
            last_error=str(exc)[:2000],
        )
        return False
    _record_send(
        event_id,
        published_at=Now(),
        last_publish_at=Now(),
        publish_attempts=F("publish_attempts") + 1,
        resend_at=OutboxEvent.resend_after(sends=1),
    )
    return True


def _record_send(event_id: int, **fields: Any) -> None:
    """Write a send's outcome on the event's row; a database failure is logged, not raised."""
    try:
        OutboxEvent.all_tenants.filter(pk=event_id, published_at__isnull=True).update(**fields)
    except DatabaseError as exc:
        logger.warning(
            "outbox event %s: its send could not be recorded (the sweeper sends it again): %s",
            event_id,
            exc,
        )


def mark_consumed(*, event_id: int) -> None:
    """The consumer is done with the event, whatever came of it: it is not sent again."""
    OutboxEvent.all_tenants.filter(pk=event_id, consumed_at__isnull=True).update(consumed_at=Now())


def expect_retry(*, event_id: int, countdown: float) -> None:
    """The consumer asked for a retry in ``countdown`` seconds, which the broker holds: the
    sweeper counts its wait from then, not from the last send."""
    OutboxEvent.all_tenants.filter(pk=event_id, consumed_at__isnull=True).update(
        resend_at=OutboxEvent.resend_after(sends=1, delay_seconds=countdown)
    )


def sweep_outbox(*, grace_seconds: float | None = None, limit: int = 500) -> int:
    """Publish events still unpublished ``grace_seconds`` after they were written (or after
    the last attempt); returns how many were published.

    The grace period leaves the on-commit publish time to do its job. Each row is claimed with
    a conditional ``UPDATE`` of ``last_publish_at`` before it is sent, so two sweepers running
    at once do not both send it (if they did, consumers would absorb the duplicate). A sweep
    stops at a send that fails (the broker down or hung), leaving the rest to the next one.
    """
    grace = settings.OUTBOX_PUBLISH_GRACE_SECONDS if grace_seconds is None else grace_seconds
    cutoff = timezone.now() - timedelta(seconds=grace)
    due = Q(published_at__isnull=True, created_at__lte=cutoff) & (
        Q(last_publish_at__isnull=True) | Q(last_publish_at__lte=cutoff)
    )
    published = 0
    for event_id in (
        OutboxEvent.all_tenants.filter(due, writable())
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    ):
        if dispatch.broker_paused():
            break  # a send just failed: the next sweep goes on from here
        claimed = OutboxEvent.all_tenants.filter(due, pk=event_id).update(last_publish_at=Now())
        if claimed and publish_event(event_id=event_id):
            published += 1
    if published:
        logger.info("outbox sweeper published %d event(s) left behind", published)
    return published + _send_unconsumed_again(limit=limit)


def _send_unconsumed_again(*, limit: int) -> int:
    """Send again events published but not consumed whose ``resend_at`` has come, soonest
    first; each send sets the next one, twice as far off. Claimed like the first sends, by a
    conditional update of ``resend_at``. How many were sent."""
    due = OutboxEvent.all_tenants.filter(consumed_at__isnull=True, resend_at__lte=Now())
    sent = 0
    for event_id, attempts, resend_at in (
        due.filter(writable())
        .order_by("resend_at")
        .values_list("id", "publish_attempts", "resend_at")[:limit]
    ):
        if dispatch.broker_paused():
            break
        claimed = due.filter(pk=event_id, resend_at=resend_at).update(
            last_publish_at=Now(),
            publish_attempts=F("publish_attempts") + 1,
            resend_at=OutboxEvent.resend_after(sends=attempts + 1),
        )
        if not claimed:
            continue
        try:
            dispatch.enqueue(dispatch.HANDLE_OUTBOX_EVENT, event_id)
        except Exception as exc:  # the broker is down: the next sweep tries again
            logger.warning("outbox event %s not sent again: %s", event_id, exc)
            _unclaim_resend(event_id, sends=attempts, resend_at=resend_at, error=exc)
            continue
        sent += 1
    if sent:
        logger.warning(
            "outbox sweeper sent %d event(s) again that no consumer finished "
            "(a message lost by the broker, or no worker for %s s)",
            sent,
            settings.OUTBOX_REDELIVER_AFTER_SECONDS,
        )
    return sent


def _unclaim_resend(event_id: int, *, sends: int, resend_at: datetime, error: Exception) -> None:
    """Undo the claim of a send again that the broker did not take: no message left, so it is
    no send. Counted, it doubled the wait for the next one (20 minutes, then 40, up to a day)
    although nothing was sent, and an event whose message Redis lost, met by sweeps while the
    broker was down, waited that long once it was back. The event stays due, as it was, for
    the next sweep; only the error is kept. Conditional on the claim this sweep made, so a
    consumer that finished with it meanwhile, or another sweep, is not undone."""
    OutboxEvent.all_tenants.filter(
        pk=event_id, consumed_at__isnull=True, publish_attempts=sends + 1
    ).update(publish_attempts=sends, resend_at=resend_at, last_error=str(error)[:2000])
