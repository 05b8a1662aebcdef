"""The database layer (seed 4.3): the committed record is the truth about a key.

:func:`insert_record` runs inside the caller's business transaction. It is one statement,
``INSERT ... ON CONFLICT (tenant_key, scope, key) DO UPDATE ... WHERE <old row expired>``:
a live record of the same key makes it insert nothing (and, if that record is not committed
yet, PostgreSQL makes it wait for the other transaction), so of two duplicates exactly one
transaction commits a record — and with it, its business write. On PostgreSQL that statement
is the body of ``idempotency_insert_record()`` (migration 0008), which the server plans once
per connection; the query sent is a short call of it.

When the record is the transaction's last statement, it can carry the ``COMMIT`` too
(``commit=True``: one round trip instead of two). A live record must then *fail* the statement,
so the ``COMMIT`` behind it never runs: the function is told to raise ``unique_violation`` when
it inserted nothing.

:func:`committed_result` reads a key's record with a statement built once per process too: the
ORM built and compiled its query on every call (about a millisecond, twice per first execution
without Redis). :func:`committed_result_statement` hands the same statement to the database
claim, which sends it behind the claim in one round trip (``database_claim.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

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
# What a replay needs of the record (committed_result): the key is known; its expiry bounds
# the Redis entry a replay puts back.
_RESULT_COLUMNS = (*_COLUMNS[3:10], "expires_at")


@dataclass(frozen=True)
class CommittedResult:
    fingerprint: str
    fingerprint_version: int
    field_hashes: dict[str, str]
    response: StoredResponse
    # None only for a result not read from a record's row
    expires_at: datetime | None = None

    def seconds_left(self, default: int) -> int:
        """How long the result still replays: until the record's expiry (at least a second),
        never the full TTL again. A Redis entry put back from the record with a fresh TTL
        outlived the record, its retention (and the tenant's) restarted by any retry."""
        if self.expires_at is None:
            return default
        return max(1, math.ceil((self.expires_at - timezone.now()).total_seconds()))


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
    params: list[Any] = [
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
        if connection.vendor != "postgresql":
            cursor.execute(_upsert_sql(connection.vendor), params)
            return cursor.fetchone() is not None
        cursor.execute(_FUNCTION_CALL + ("; COMMIT" if commit else ""), [*params, commit])
        return commit or cursor.fetchone()[0]


# The function's parameters in _COLUMNS order, then refuse_live; the casts pick the function
# whichever types the driver gives the values (client-side binding sends bare literals).
_FUNCTION_CALL = (
    "SELECT idempotency_insert_record(%s, %s, %s, %s, %s::smallint, %s::jsonb, %s::smallint, "
    "%s::jsonb, %s, %s, %s, %s, %s)"
)


@cache
def _upsert_sql(vendor: str) -> str:
    """The record's statement where there is no function (SQLite, the embedded demo), built
    once per process; ``vendor`` keys it to the database whose quoting it uses."""
    q = connection.ops.quote_name
    table = q(IdempotencyRecord._meta.db_table)
    columns = ", ".join(q(c) for c in _COLUMNS)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in _COLUMNS[3:])
    conflict = ", ".join(q(c) for c in _COLUMNS[:3])
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(_COLUMNS))}) "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {updates} "
        f"WHERE {table}.{q('expires_at')} <= EXCLUDED.{q('created_at')} "
        f"RETURNING 1"
    )


def committed_result(scoped: ScopedKey) -> CommittedResult | None:
    """The live committed record of this key, if any (one indexed SELECT)."""
    sql, params = committed_result_statement(scoped)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return committed_from_row(cursor.fetchone())


def committed_result_statement(scoped: ScopedKey) -> tuple[str, list[Any]]:
    """The SELECT of :func:`committed_result` and its parameters, for a caller that sends it
    in one round trip behind another statement; :func:`committed_from_row` reads its row."""
    expires_at = IdempotencyRecord._meta.get_field("expires_at")
    now = expires_at.get_db_prep_value(timezone.now(), connection)
    return _select_sql(connection.vendor), [scoped.tenant, scoped.scope, scoped.key_digest, now]


def committed_from_row(row: Sequence[Any] | None) -> CommittedResult | None:
    """The result in a row of :func:`committed_result_statement` (None: no live record); the
    JSON columns are decoded by their fields, as the ORM decodes them."""
    if row is None:
        return None
    fingerprint, version, field_hashes, status, headers, body, location, expires_at = row
    return CommittedResult(
        fingerprint=fingerprint,
        fingerprint_version=version,
        field_hashes=_from_json("field_hashes", field_hashes) or {},
        response=StoredResponse(
            status=status,
            headers=tuple(tuple(h) for h in _from_json("response_headers", headers)),
            body=bytes(body),
            pointer=location,
        ),
        expires_at=_aware(IdempotencyRecord._meta.get_field("expires_at").to_python(expires_at)),
    )


def _aware(value: datetime) -> datetime:
    """A raw cursor's datetime as an aware one (SQLite's driver gives naive UTC)."""
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


def _from_json(column: str, value: Any) -> Any:
    return IdempotencyRecord._meta.get_field(column).from_db_value(value, None, connection)


@cache
def _select_sql(vendor: str) -> str:
    """The statement of :func:`committed_result_statement`, built once per process (``vendor``
    keys it to the database whose quoting it uses). The unique constraint on the three key
    columns leaves at most one row."""
    q = connection.ops.quote_name
    columns = ", ".join(q(c) for c in _RESULT_COLUMNS)
    matches = " AND ".join(f"{q(c)} = %s" for c in _COLUMNS[:3])
    return (
        f"SELECT {columns} FROM {q(IdempotencyRecord._meta.db_table)} "
        f"WHERE {matches} AND {q('expires_at')} > %s LIMIT 1"
    )
