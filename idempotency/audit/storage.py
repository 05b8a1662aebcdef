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
batch, is neither written nor counted again. A Redis client that re-sends an ``XADD`` whose
reply was lost leaves two stream entries of one event; an append that timed out after it
landed is also written to the database by the fallback.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from django.db import connection, transaction
from django.db.models import Q

from idempotency.audit.events import AuditEvent, CountKey
from idempotency.models import DuplicateAudit, OutcomeCount


def save_events(events: Iterable[AuditEvent]) -> int:
    """Write the duplicates' audit rows and count every event; returns the rows written.

    Inside a transaction the writes join it (in a savepoint, so a failure here leaves the
    caller's transaction usable); otherwise they commit together on their own.
    """
    with transaction.atomic():
        events = _not_yet_written(list(events))
        if not events:
            return 0
        rows = [e.to_model() for e in events if e.is_duplicate]
        DuplicateAudit.objects.bulk_create(rows)
        add_counts(Counter(e.count_key for e in events))
    return len(rows)


def _not_yet_written(events: list[AuditEvent]) -> list[AuditEvent]:
    """``events`` without the duplicates' events already written or repeated in the list (a
    first execution has no row and is never sent twice: it is only counted in-process)."""
    by_tenant: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e.is_duplicate:
            by_tenant[e.tenant_key].append(e.event_id)
    if not by_tenant:
        return events
    written = Q()
    for tenant_key, ids in by_tenant.items():  # the unique key's index, tenant first
        written |= Q(tenant_key=tenant_key, event_id__in=ids)
    seen = set(DuplicateAudit.objects.filter(written).values_list("tenant_key", "event_id"))
    fresh = []
    for event in events:
        if event.is_duplicate:
            if (event.tenant_key, event.event_id) in seen:
                continue
            seen.add((event.tenant_key, event.event_id))
        fresh.append(event)
    return fresh


def add_counts(counts: Mapping[CountKey, int]) -> None:
    """Add ``counts`` to their ``OutcomeCount`` rows (created at zero when new)."""
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
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
