"""Writing audit events into the database: audit rows and hourly outcome counters together.

:func:`save_events` is the one way events reach the database, whether they come from the
Redis stream (``idempotency.stores.audit_stream``), the in-process queue
(`idempotency.stores.audit_pending`) or a request that is inside a transaction already. Rows and
counters are written in one transaction, so a counter never counts an audit that is not there.

Counters are added to with ``INSERT … ON CONFLICT DO UPDATE SET count = count + excluded``
(PostgreSQL, and SQLite for the embedded demo), one statement for a whole batch, in sorted
order: two writers adding to the same rows lock them in the same order and cannot deadlock.

An event reaches the database once, however often it was sent: a duplicate's row carries its
event id (unique per tenant), and an event whose id is already written, or repeated in the
batch, is neither written nor counted again. The rows go in one ``INSERT … ON CONFLICT
(tenant_key, event_id) DO NOTHING RETURNING``, which names the rows it wrote: only those (and
the first executions, which have no row) are counted, so a writer of the same event at the
same time cannot make it count twice either; a batch of up to 500 events is two statements. A
Redis client that re-sends an ``XADD`` whose reply was lost leaves two stream entries of one
event; an append that timed out after it landed is also written to the database by the
fallback.

Outside a transaction (a duplicate answered while Redis is away, a drain) the first statement
carries the ``BEGIN`` and the counters' statement the ``COMMIT`` where several statements ride
in one query (``idempotency/core/transactions.py``): one event is two round trips, not four.
:func:`save_closing` writes the audit of a replay found under the engine's database claim into
the claim's transaction instead, its counters' statement committing it: the claim's query, the
rows and the counts, three round trips for the whole replay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection

from idempotency.audit.events import AuditEvent, CountKey
from idempotency.core.transactions import Opening, own_transaction
from idempotency.models import DuplicateAudit, OutcomeCount

# Rows per INSERT: 14 parameters each stays far below every driver's limit per statement.
_ROWS_PER_INSERT = 500


def save_events(events: Iterable[AuditEvent]) -> int:
    """Write the duplicates' audit rows and count every event; returns the rows written.

    Inside a transaction the writes join it (in a savepoint, so a failure here leaves the
    caller's transaction usable); otherwise they commit together on their own.
    """
    events = _first_of_each(events)
    if not events:
        return 0
    with own_transaction() as own:
        return _write(events, own.opening(), commit=own.commit_rides_along())


def save_closing(events: Iterable[AuditEvent]) -> int:
    """Write ``events`` as the last statements of the current transaction, the counters'
    statement carrying its ``COMMIT``: for a transaction of its own that holds nothing else
    worth keeping (a replay the engine found under its database claim), so no savepoint guards
    the writes. The caller checks that the ``COMMIT`` may ride along
    (``EngineTransaction.commit_rides_along``); if a statement fails nothing is committed and
    the transaction is the caller's to roll back."""
    events = _first_of_each(events)
    return _write(events, Opening(pending=False), commit=True) if events else 0


def _write(events: list[AuditEvent], opening: Opening, *, commit: bool) -> int:
    written = _insert_rows([e for e in events if e.is_duplicate], opening)
    add_counts(
        Counter(
            e.count_key
            for e in events
            if not e.is_duplicate or (e.tenant_key, e.event_id) in written
        ),
        opening,
        commit=commit,
    )
    return len(written)


def _first_of_each(events: Iterable[AuditEvent]) -> list[AuditEvent]:
    """``events`` without a duplicate's event repeated in them (a first execution has no row
    and is never sent twice: it is only counted in-process)."""
    seen: set[tuple[str, str]] = set()
    first = []
    for event in events:
        if event.is_duplicate:
            if (event.tenant_key, event.event_id) in seen:
                continue
            seen.add((event.tenant_key, event.event_id))
        first.append(event)
    return first


def _insert_rows(events: list[AuditEvent], opening: Opening) -> set[tuple[str, str]]:
    """Insert the events' rows, skipping those whose event is already written; the
    ``(tenant_key, event_id)`` of the rows inserted."""
    fields = [f for f in DuplicateAudit._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(DuplicateAudit._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    row = f"({', '.join(['%s'] * len(fields))})"
    unique = ", ".join(connection.ops.quote_name(c) for c in ("tenant_key", "event_id"))
    written: set[tuple[str, str]] = set()
    for start in range(0, len(events), _ROWS_PER_INSERT):
        batch = events[start : start + _ROWS_PER_INSERT]
        params: list[Any] = []
        for event in batch:
            audit = event.to_model()
            # the values as Django's insert compiler prepares them (defaults, JSON, dates)
            params += [f.get_db_prep_save(f.pre_save(audit, add=True), connection) for f in fields]
        sql = (
            f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(batch))} "
            f"ON CONFLICT ({unique}) DO NOTHING RETURNING {unique}"
        )
        with connection.cursor() as cursor:
            opening.execute(cursor, sql, params)
            written.update((tenant_key, event_id) for tenant_key, event_id in cursor.fetchall())
    return written


def add_counts(counts: Mapping[CountKey, int], opening: Opening, *, commit: bool) -> None:
    """Add ``counts`` to their ``OutcomeCount`` rows (created at zero when new), the last
    statement of the transaction: with ``commit`` it carries the ``COMMIT`` too (an error in
    it skips the ``COMMIT``; the transaction is then rolled back)."""
    if not counts:
        return
    table = connection.ops.quote_name(OutcomeCount._meta.db_table)
    columns = ("tenant_key", "endpoint", "outcome", "hour", "count")
    quoted = [connection.ops.quote_name(c) for c in columns]
    unique = ", ".join(quoted[:4])
    count = quoted[4]
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(counts))
    params: list[object] = []
    for (tenant, endpoint, outcome, hour), n in sorted(counts.items()):
        params += [tenant, endpoint, outcome, connection.ops.adapt_datetimefield_value(hour), n]
    sql = (
        f"INSERT INTO {table} ({', '.join(quoted)}) VALUES {values} "
        f"ON CONFLICT ({unique}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}"
    )
    if commit:
        sql += "; COMMIT"
    with connection.cursor() as cursor:
        opening.execute(cursor, sql, params)
