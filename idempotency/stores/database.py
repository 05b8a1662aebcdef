"""The database layer (seed 4.3): the committed record is the truth about a key.

:func:`insert_record` runs inside the caller's business transaction. It is one statement,
``INSERT ... ON CONFLICT (tenant_key, scope, key) DO UPDATE ... WHERE <old row expired>``:
a live record of the same key makes it insert nothing (and, if that record is not committed
yet, PostgreSQL makes it wait for the other transaction), so of two duplicates exactly one
transaction commits a record — and with it, its business write.

When the record is the transaction's last statement, it can carry the ``COMMIT`` too
(``commit=True``: one round trip instead of two). A live record must then *fail* the statement,
so the ``COMMIT`` behind it never runs: the insert is wrapped in a statement that calls
``idempotency_live_record_exists()`` (migration 0006), which raises ``unique_violation``, when
nothing was inserted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.db import connection
from django.utils import timezone

from idempotency.core.keys import ScopedKey
from idempotency.core.outcomes import StoredResponse
from idempotency.models import IdempotencyRecord

_COLUMNS = (
    "tenant_key",
    "scope",
    "key",
    "fingerprint",
    "fingerprint_version",
    "field_hashes",
    "response_status",
    "response_headers",
    "response_body",
    "resource_location",
    "created_at",
    "expires_at",
)


@dataclass(frozen=True)
class CommittedResult:
    fingerprint: str
    fingerprint_version: int
    field_hashes: dict[str, str]
    response: StoredResponse
    expires_at: datetime


def insert_record(
    *,
    scoped: ScopedKey,
    fingerprint: str,
    fingerprint_version: int,
    field_hashes: dict[str, str],
    response: StoredResponse,
    ttl_seconds: int,
    commit: bool = False,
) -> bool:
    """Record the result in the current transaction; False if a live record already exists.

    ``commit`` (PostgreSQL, through a client-side binding cursor, see
    :meth:`idempotency.core.transactions.EngineTransaction.commit_rides_along`): commit the
    transaction in the same round trip; a live record then raises ``IntegrityError`` instead,
    and nothing is committed."""
    now = timezone.now()
    sql = _insert_sql(connection.vendor, commit=commit)
    params = [
        scoped.tenant,
        scoped.scope,
        scoped.key_digest,
        fingerprint,
        fingerprint_version,
        json.dumps(field_hashes),
        response.status,
        json.dumps([list(h) for h in response.headers]),
        response.body,
        response.pointer,
        now,
        now + timedelta(seconds=ttl_seconds),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return commit or cursor.fetchone() is not None


@cache
def _insert_sql(vendor: str, *, commit: bool) -> str:
    """The record's statement (see :func:`insert_record`), built once per process; ``vendor``
    keys it to the database whose quoting it uses."""
    q = connection.ops.quote_name
    table = q(IdempotencyRecord._meta.db_table)
    columns = ", ".join(q(c) for c in _COLUMNS)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in _COLUMNS[3:])
    conflict = ", ".join(q(c) for c in _COLUMNS[:3])
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(_COLUMNS))}) "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {updates} "
        f"WHERE {table}.{q('expires_at')} <= EXCLUDED.{q('created_at')} "
        f"RETURNING 1"
    )
    if not commit:
        return sql
    # Two statements: psycopg sends them with the simple query protocol (client-side
    # binding); an error in the first skips the COMMIT and aborts the transaction.
    return (
        f"WITH inserted AS ({sql}) SELECT idempotency_live_record_exists() "
        "WHERE NOT EXISTS (SELECT FROM inserted); COMMIT"
    )


def committed_result(scoped: ScopedKey) -> CommittedResult | None:
    """The live committed record of this key, if any (one indexed SELECT)."""
    record = (
        IdempotencyRecord.objects.filter(
            tenant_key=scoped.tenant,
            scope=scoped.scope,
            key=scoped.key_digest,
            expires_at__gt=timezone.now(),
        )
        .only(*_COLUMNS)
        .first()
    )
    if record is None:
        return None
    return CommittedResult(
        fingerprint=record.fingerprint,
        fingerprint_version=record.fingerprint_version,
        field_hashes=record.field_hashes or {},
        response=StoredResponse(
            status=record.response_status,
            headers=tuple(tuple(h) for h in record.response_headers),
            body=bytes(record.response_body),
            pointer=record.resource_location,
        ),
        expires_at=record.expires_at,
    )
