"""Writing audit events into the database: audit rows and hourly outcome counters together.

:func:`save_events` is the one way events reach the database, whether they come from the
Redis stream (``idempotency.stores.audit_stream``), the in-process queue
(`idempotency.stores.audit_pending`) or a request that is inside a transaction already. Rows and
counters are written in one transaction, so a counter never counts an audit that is not there.

Counters are added to with ``INSERT … ON CONFLICT DO UPDATE SET count = count + excluded``
(PostgreSQL, and SQLite for the embedded demo), one statement for a whole batch, in sorted
order: two writers adding to the same rows lock them in the same order and cannot deadlock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from django.db import connection, transaction

from idempotency.audit.events import AuditEvent, CountKey
from idempotency.models import DuplicateAudit, OutcomeCount


def save_events(events: Iterable[AuditEvent]) -> int:
    """Write the duplicates' audit rows and count every event; returns the rows written.

    Inside a transaction the writes join it (in a savepoint, so a failure here leaves the
    caller's transaction usable); otherwise they commit together on their own.
    """
    events = list(events)
    if not events:
        return 0
    with transaction.atomic():
        rows = [e.to_model() for e in events if e.is_duplicate]
        DuplicateAudit.objects.bulk_create(rows)
        add_counts(Counter(e.count_key for e in events))
    return len(rows)


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
