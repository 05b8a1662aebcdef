"""How an audit event reaches the database without being lost when a worker is SIGKILLed.

:func:`report` picks the first durable path that is open, before the request is answered:

1. a first execution (MISS) is only counted: it joins the in-process batch
   (:mod:`idempotency.stores.audit_pending`), written every ``AUDIT_FLUSH_SECONDS``, so a first
   execution costs no extra round trip;
2. a duplicate decided inside a database transaction (a payment callback, a dashboard move)
   is written in that transaction: it exists exactly when the decision committed;
3. otherwise a duplicate is appended (XADD) to the audit stream on the tenant's Redis node —
   one round trip, no database query, so a replay stays cheap; a replay Redis serves off a
   Cluster is appended by its own claim (:func:`claim_append`, ``claim_audit.lua``), in the
   claim's round trip;
4. with no usable Redis (database-only, breaker open, XADD failing) it is written to the
   database at once; what the database refuses too goes to the in-process batch. A replay the
   engine found under its database claim is written into the claim's transaction, which the
   counters' statement commits (:func:`report_closing`).

:func:`drain_all` (run by the host's Celery beat, e.g. every 5 s) copies each node's stream into
the database in batches. Each batch is written in one transaction with that node's
``AuditStreamCursor`` (the last entry id copied), read under a row lock, so concurrent or
repeated drains never write an entry twice (a stream that began again below the cursor, on a
node that lost its data, is copied from its start: :func:`_stream_began_again`); entries up to
the cursor are trimmed afterwards
(XTRIM MINID, exactly: what was copied leaves Redis), and the stream is capped at
``AUDIT_STREAM_MAXLEN`` entries in case no drain runs.

What can be lost: a duplicate whose request was still running when its process died, before
the XADD or the commit (its client saw no answer either); the first-execution counts and
fallback events a SIGKILLed process held (at most ``AUDIT_FLUSH_SECONDS`` worth); stream
entries trimmed by the cap before a drain copied them; and the entries no drain had copied yet
when their node lost its data (a restart without persistence, a flush, a failover to a replica
that had not received them).
:mod:`idempotency.stores.stream_metrics` shows each node's backlog and the age of its oldest
entry not yet copied, read at scrape time (true whichever process drains), to alert on long
before the cap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError, ResponseError

from idempotency import metrics
from idempotency.audit import AuditEvent, save_events
from idempotency.audit.storage import save_closing
from idempotency.core.conf import channel_name, engine_hook, engine_setting
from idempotency.models import AuditStreamCursor
from idempotency.stores.audit_pending import pending
from idempotency.stores.nodes import (
    REDIS_UNAVAILABLE,
    node_cannot_serve,
    node_name,
    redis_store_for,
)
from idempotency.stores.redis_store import AuditAppend

logger = logging.getLogger(__name__)


def stream_key() -> str:
    """One stream per Redis node (``<CHANNEL_PREFIX>:audits``), shared by its tenants."""
    return channel_name("audits")


def report(event: AuditEvent, *, in_transaction: bool = False) -> None:
    """Send ``event`` along the first durable path open now (see the module docstring).

    ``in_transaction``: the caller decided the duplicate inside its own open transaction and
    wants the audit written in it (a doomed transaction falls through to the stream). A write
    that dooms it (the database ended the session: the audit's savepoint cannot be rolled
    back to) raises its error: nothing the caller decided will commit, and the caller must
    not answer as if it had (Django rolls such a transaction back at its end without a word)."""
    if not event.is_duplicate:
        pending.record(event)  # a first execution is only counted: batched, see above
        return
    if in_transaction and not connection.needs_rollback:
        try:
            save_events([event])
            return
        except DatabaseError:
            if connection.needs_rollback:
                raise
            logger.warning("could not write an audit to the database", exc_info=True)
    node = redis_store_for(event.tenant_key)
    if node is not None:
        try:
            node.run("audit", lambda: append(node.store.client, event))
            return
        except RedisError as exc:
            logger.warning(
                "could not append to the audit stream (%s)",
                exc,
                exc_info=not node_cannot_serve(exc),
            )
    if not connection.needs_rollback and _save(event):
        return
    pending.record(event)


def report_closing(event: AuditEvent) -> None:
    """Write ``event`` as the last statements of the caller's transaction of its own, which
    its counters' statement commits (:func:`idempotency.audit.storage.save_closing`): the audit
    of a replay the engine found under its database claim, durable before the answer as on
    the other paths. If the database refuses, the transaction is marked for rollback (it held
    only the claim) and the event goes to the in-process batch."""
    if not _save(event, write=save_closing):
        transaction.set_rollback(True)
        pending.record(event)


def claim_append(event: AuditEvent) -> AuditAppend:
    """``event`` as a claim appends it if it answers HIT; the script adds the resource from
    the stored reply."""
    fields = event.to_fields()
    del fields["r"]
    return AuditAppend(
        stream=stream_key(), maxlen=engine_setting("AUDIT_STREAM_MAXLEN"), fields=fields
    )


def append(client: Any, event: AuditEvent) -> None:
    client.xadd(
        stream_key(),
        event.to_fields(),
        maxlen=engine_setting("AUDIT_STREAM_MAXLEN"),
        approximate=True,
    )


def drain_all() -> int:
    """Copy every node's audit stream into the database; returns the entries copied."""
    hook = engine_hook("ALL_REDIS_CLIENTS")
    copied = 0
    for client in hook() if hook else []:
        try:
            copied += drain(client)
        except REDIS_UNAVAILABLE:
            logger.warning("could not drain the audit stream of %s", node_name(client))
    return copied


def drain_audits() -> int:
    """Everything waiting, in this process and in every node's stream, into the database
    now: what the beat task runs, and what a test calls before it reads audits."""
    return pending.flush() + drain_all()


def drain(client: Any) -> int:
    """Copy one node's stream into the database, batch by batch, until it is empty."""
    name = cursor_name(client)
    batch_size = engine_setting("AUDIT_DRAIN_BATCH")
    copied = 0
    first_batch = True
    while True:
        with transaction.atomic():
            cursor, _ = AuditStreamCursor.objects.get_or_create(stream=name)
            cursor = AuditStreamCursor.objects.select_for_update().get(pk=cursor.pk)
            if first_batch and _stream_began_again(client, cursor.last_id):
                cursor.last_id = "0-0"
            first_batch = False
            entries = client.xrange(stream_key(), min=f"({cursor.last_id}", count=batch_size)
            if not entries:
                return copied
            save_events(AuditEvent.from_fields(fields) for _, fields in entries)
            cursor.last_id = as_text(entries[-1][0])
            cursor.drained_at = timezone.now()
            cursor.save(update_fields=["last_id", "drained_at"])
        copied += len(entries)
        metrics.audits_drained.inc(len(entries))
        # exact, not redis-py's default ``~``: an approximate trim removes only whole blocks
        # of entries, and one also holding an entry appended since the read (any busy node)
        # kept every copied entry in it, with its principal, address and user agent, after
        # an erasure or offboarding had drained the stream to delete them
        client.xtrim(stream_key(), minid=_next_id(cursor.last_id), approximate=False)
        if len(entries) < batch_size:
            return copied


def _stream_began_again(client: Any, last_copied: str) -> bool:
    """Whether the node's stream has never numbered an entry as far as the cursor: it is not
    the stream the cursor followed, but one that began again below it (the node lost its data,
    or came back from an older snapshot) and numbers its entries by its own clock. A stream
    keeps the last id it gave out through trims, so the stream the cursor followed never does.

    Such a stream is then copied from its start: behind a node whose clock ran ahead (the
    cursor its ids left), a replacement with a slower clock (a failover, a node swapped for
    an empty one) numbered every audit below the cursor, where no drain read it, and the
    first drain to copy one above it trimmed them all away. The entries of an older
    snapshot were copied before: read again, they are the same events, written once."""
    try:
        info = client.xinfo_stream(stream_key())
    except ResponseError:  # no stream on the node yet: nothing to copy
        return False
    return entry_id_parts(as_text(info["last-generated-id"])) < entry_id_parts(last_copied)


def cursor_name(client: Any) -> str:
    """The node's row in ``AuditStreamCursor``."""
    return f"{node_name(client)} {stream_key()}"


def discard_all() -> None:
    """Forget waiting events, in this process and in every node's stream (tests)."""
    pending.discard()
    hook = engine_hook("ALL_REDIS_CLIENTS")
    for client in hook() if hook else []:
        client.delete(stream_key())


def _save(event: AuditEvent, *, write: Callable[[list[AuditEvent]], int] = save_events) -> bool:
    """Write ``event`` to the database with ``write``; False (logged) if it refuses."""
    try:
        write([event])
    except DatabaseError:
        logger.warning("could not write an audit to the database", exc_info=True)
        return False
    return True


def entry_id_parts(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _next_id(entry_id: str) -> str:
    """The smallest id after ``entry_id``: XTRIM MINID keeps ids >= it."""
    ms, seq = entry_id_parts(entry_id)
    return f"{ms}-{seq + 1}"


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
