"""The database claim (ADR 0005): who may run the view when Redis did not decide.

Without a Redis claim (database-only by configuration, the node's breaker open, a Redis error)
the record's unique index alone would keep the *effects* single, but every concurrent duplicate
would run the view before being rolled back. So the engine first takes a claim on the key in
the database, inside the business transaction, before it looks for a committed record:

- PostgreSQL: a transaction-scoped advisory lock on a 64-bit hash of the scoped key. It is
  released by the commit (or rollback) that also publishes the record, so whoever gets it next
  and then reads sees the winner's record. Transaction-scoped locks work through PgBouncer in
  transaction mode (session locks would not: the next transaction may run on another server
  connection). A key waits for nothing but its own duplicates.
- SQLite (the embedded demo): the transaction's ``BEGIN IMMEDIATE`` (``transaction_mode``
  in the settings) already holds the database's one writer lock, so a duplicate's transaction
  starts only after the first committed; nothing more to take.
- Other databases: none; the engine does not run on them (the system check
  ``idempotency.E008`` refuses them).

The in-flight policy is the same as in Redis mode: ``reject`` answers at once when the key is
held, ``wait`` blocks up to the endpoint's wait budget (``lock_timeout``, set for this one
statement and restored in the same round trip).

When the claim is the only one, the engine reads the key's record under it
(:func:`claim_and_read`): on PostgreSQL in the claim's own round trip, as a second statement of
the same query, which reads a snapshot of its own taken once the claim is held; a third
statement establishes the savepoint the view then runs in (``engine._run_view``).
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Any

from django.db import OperationalError, connection
from django.db.backends.utils import CursorWrapper

from idempotency.core.keys import ScopedKey
from idempotency.core.transactions import Opening, savepoint_sql, statements_ride_along
from idempotency.stores import database as db_store

# PostgreSQL's lock_not_available: the wait budget ran out before the lock was free.
_LOCK_NOT_AVAILABLE = "55P03"
_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"
# One round trip: remember lock_timeout, set the budget, wait for the lock, restore it (the
# target list is evaluated left to right; OFFSET 0 keeps the subquery, and its volatile
# columns, from being flattened away).
_WAIT_LOCK = (
    "SELECT set_config('lock_timeout', claim.previous, true) FROM ("
    "SELECT current_setting('lock_timeout') AS previous, "
    "set_config('lock_timeout', %s, true) AS budget, "
    "pg_advisory_xact_lock(%s) AS held OFFSET 0) AS claim"
)


class ClaimBusy(Exception):
    """Another transaction holds the key: under ``reject`` at once, under ``wait`` for longer
    than the wait budget."""


class Claimed(Enum):
    FREE = "free"  # nobody held the key: a duplicate before us, if any, finished earlier
    WAITED = "waited"  # we waited for a holder, which has committed or rolled back since
    NONE = "none"  # this database has no claim of its own (see the module docstring)


def lock_id(scoped: ScopedKey) -> int:
    """The advisory lock id of a scoped key: a signed 64-bit hash of tenant, scope and key
    (the record's unique columns). A collision only makes two keys wait for each other."""
    digest = hashlib.sha256(f"{scoped.tenant}\x1f{scoped.scope}\x1f{scoped.key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def claim_key(scoped: ScopedKey, *, wait_seconds: float, opening: Opening | None = None) -> Claimed:
    """Claim ``scoped`` for the current transaction (call it inside one, before reading the
    record). ``wait_seconds`` 0 is the ``reject`` policy. Raises :class:`ClaimBusy`; the
    transaction is then unusable (a timed-out wait aborts it) and must be rolled back.
    ``opening``: what sends the transaction's statements, where the claim is the first one and
    may carry its ``BEGIN`` (:class:`idempotency.core.transactions.Opening`)."""
    if connection.vendor != "postgresql":
        return Claimed.NONE
    lock = lock_id(scoped)
    with connection.cursor() as cursor:
        (opening or Opening(pending=False)).execute(cursor, _TRY_LOCK, [lock])
        if cursor.fetchone()[0]:
            return Claimed.FREE
        _wait(cursor, _WAIT_LOCK, [_budget(wait_seconds), lock])
    return Claimed.WAITED


def claim_and_read(
    scoped: ScopedKey,
    *,
    wait_seconds: float,
    opening: Opening | None = None,
    savepoint: str | None = None,
) -> db_store.CommittedResult | None:
    """Claim ``scoped`` as :func:`claim_key` does, then read its committed record under the
    claim: whoever held the key before has committed or rolled back by then, so a record found
    is the answer. Where several statements ride in one query, the read goes in the claim's
    round trip (wait or no wait), and a record it finds is the answer even when the claim was
    not free (a committed record is final; under ``reject`` a replay would otherwise be told
    to retry while another replay of the key holds the claim); elsewhere it follows the claim.
    ``opening``: as for :func:`claim_key`.

    ``savepoint``: a savepoint to establish once the claim is held, in the same query (for the
    view the engine runs next). A wait re-establishes it after the lock: the one the try's
    query made is older than the lock, and rolling back to it would release the lock; a newer
    savepoint of the same name hides the older one."""
    if not statements_ride_along():
        claim_key(scoped, wait_seconds=wait_seconds, opening=opening)
        found = db_store.committed_result(scoped)
        if savepoint is not None:
            with connection.cursor() as cursor:
                cursor.execute(savepoint_sql(savepoint))
        return found
    read, read_params = db_store.committed_result_statement(scoped)
    then = f"; {savepoint_sql(savepoint)}" if savepoint is not None else ""
    lock = lock_id(scoped)
    with connection.cursor() as cursor:
        (opening or Opening(pending=False)).execute(
            cursor, f"{_TRY_LOCK}; {read}{then}", [lock, *read_params]
        )
        locked = cursor.fetchone()[0]
        cursor.nextset()
        found = db_store.committed_from_row(cursor.fetchone())
        # a record committed before the try's read is the answer, whoever holds the claim now
        # (another replay of the key, answering in its own claim's transaction)
        if locked or found is not None:
            return found
        _wait(
            cursor,
            f"{_WAIT_LOCK}; {read}{then}",
            [_budget(wait_seconds), lock, *read_params],
        )
        cursor.nextset()
        return db_store.committed_from_row(cursor.fetchone())


def _budget(wait_seconds: float) -> str:
    """The wait budget as ``lock_timeout``; ClaimBusy at once under ``reject`` (0)."""
    if wait_seconds <= 0:
        raise ClaimBusy
    return f"{max(1, round(wait_seconds * 1000))}ms"


def _wait(cursor: CursorWrapper, sql: str, params: list[Any]) -> None:
    """Run ``sql``, which waits for the lock within its budget; ClaimBusy when it runs out."""
    try:
        cursor.execute(sql, params)
    except OperationalError as exc:
        if _sqlstate(exc) == _LOCK_NOT_AVAILABLE:
            raise ClaimBusy from exc
        raise


def _sqlstate(exc: OperationalError) -> str | None:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
