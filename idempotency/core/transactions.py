"""The business transaction, as the engine and the host application's services share it.

The engine runs a view inside its own transaction, so that the idempotency record commits
exactly with the business writes. A service that opens ``transaction.atomic()`` in there would
make Django create a savepoint (two more round trips per request) that the engine does not
need: a refusal raised after some writes dooms the whole transaction, and the engine records
the refusal on its own after the rollback (``engine._execute``). Services therefore open their
transaction with :func:`business_atomic`: a savepoint everywhere else (a caller that catches
the error keeps its transaction usable), none inside the engine.

The engine's transaction costs no round trip of its own on PostgreSQL: its first statement,
the database claim (always without Redis; under Redis with ``DATABASE_CLAIM_UNDER_REDIS``, the
default), carries the ``BEGIN`` (:func:`execute_opening`), and its last one, the record,
carries the ``COMMIT`` (:meth:`EngineTransaction.commit_rides_along`). An audit written outside
a transaction does the same with its two statements (``idempotency/audit/storage.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import count
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections, transaction
from django.db.backends.utils import CursorWrapper
from django.db.utils import load_backend

_in_engine_transaction: ContextVar[bool] = ContextVar("in_engine_transaction", default=False)
_savepoints = count(1)


@dataclass(frozen=True)
class EngineTransaction:
    """The engine's transaction; ``outermost``: it is a real transaction, not a savepoint
    inside the caller's (whose commit is the caller's to make)."""

    outermost: bool

    def commit_rides_along(self) -> bool:
        """Whether the transaction's last statement may carry its ``COMMIT``
        (``idempotency/stores/database.py``): only a transaction of the engine's own, where
        :func:`statements_ride_along`."""
        return self.outermost and statements_ride_along()

    def begin_rides_along(self) -> bool:
        """Whether the transaction's first statement may carry its ``BEGIN``
        (:func:`execute_opening`): a transaction of the engine's own in which nothing was sent
        yet, where :func:`statements_ride_along`."""
        if not (self.outermost and statements_ride_along()):
            return False
        from psycopg.pq import TransactionStatus

        return connection.connection.info.transaction_status == TransactionStatus.IDLE

    def opening(self) -> Opening:
        """What sends this transaction's statements, the first one carrying the ``BEGIN``
        where :meth:`begin_rides_along` (call it before any statement is sent)."""
        return Opening(pending=self.begin_rides_along())


@dataclass
class Opening:
    """Sends a transaction's statements; ``pending``: the next one carries the ``BEGIN``
    (:func:`execute_opening`)."""

    pending: bool

    def execute(self, cursor: CursorWrapper, sql: str, params: list[Any]) -> None:
        if self.pending:
            self.pending = False
            execute_opening(cursor, sql, params)
        else:
            cursor.execute(sql, params)


def statements_ride_along(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether one query to database ``using`` may hold several statements, sent in one round
    trip: on PostgreSQL through psycopg 3's client-side binding cursor (Django's default), which
    sends a query with the simple protocol. psycopg2 tracks the transaction itself and a
    server-side binding cursor sends one statement per query: each statement then goes on its
    own. False until the connection is open."""
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        return False
    try:
        from psycopg import ClientCursor
    except ImportError:
        return False
    factory = getattr(wrapper.connection, "cursor_factory", None)
    return isinstance(factory, type) and issubclass(factory, ClientCursor)


def execute_opening(cursor: CursorWrapper, sql: str, params: list[Any]) -> None:
    """Run ``sql`` as the first statement of the transaction, with its ``BEGIN`` in the same
    query (call it only where :meth:`EngineTransaction.begin_rides_along`); the cursor is left
    on ``sql``'s result.

    psycopg sends a ``BEGIN`` of its own, one round trip, before the first statement of a
    transaction when the connection is not in autocommit. Switched to autocommit here (Django
    keeps its own state: inside the atomic block, autocommit off), it sends none, and the
    server runs every statement in the transaction the ``BEGIN`` opened, whatever the driver's
    mode. Django's commit or rollback at the end of the block still reach the server: psycopg
    sends them by the server's transaction status, not by its mode; and leaving the block
    switches the driver back to autocommit, its state between transactions anyway."""
    connection.connection.autocommit = True
    cursor.execute(f"BEGIN; {sql}", params)
    cursor.nextset()


def new_savepoint() -> str:
    """A name for the savepoint the view runs in when the database claim is the only claim
    (``engine._execute``), unique in the process: an engine nested in another's transaction
    never rolls back to the outer one's."""
    return f"idempotency_view_{next(_savepoints)}"


def savepoint_sql(name: str) -> str:
    """The statement that establishes savepoint ``name``; the database claim's query carries
    it (``idempotency/stores/database_claim.py``), so it costs no round trip of its own."""
    return connection.ops.savepoint_create_sql(name)


@contextmanager
def view_savepoint(name: str | None) -> Iterator[None]:
    """Run the view inside the engine's transaction, with no savepoint of Django's (no round
    trip). ``name``: a savepoint the claim's query already established, for
    :func:`roll_back_to`; the ``on_commit`` callbacks the view registers are tagged with it,
    as Django tags those of its own savepoints, so a rollback to it drops them. It is never
    released: the transaction's end ends it (a release would cost a round trip)."""
    if name is not None:
        connection.savepoint_ids.append(name)
    try:
        with transaction.atomic(savepoint=False):
            yield
    finally:
        if name is not None:
            connection.savepoint_ids.pop()


def roll_back_to(name: str) -> None:
    """Undo what the view wrote after savepoint ``name`` (and the callbacks it registered),
    keeping what came before, the database claim above all; the transaction, marked for
    rollback by the view's refusal, is usable again. One round trip."""
    transaction.set_rollback(False)
    connection.savepoint_rollback(name)


def business_atomic() -> transaction.Atomic:
    return transaction.atomic(savepoint=not _in_engine_transaction.get())


@contextmanager
def own_transaction() -> Iterator[EngineTransaction]:
    """``transaction.atomic()``, and whether it is a transaction of its own (its statements
    may then carry its ``BEGIN`` and ``COMMIT``) or a savepoint in the caller's."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        yield EngineTransaction(outermost=outermost)


class WriterBusy(Exception):
    """SQLite's one writer lock stayed taken for the database's whole ``timeout`` when the
    engine's transaction began (``BEGIN IMMEDIATE``, the database claim there, ADR 0005):
    nothing ran, so the request is answered as a key still in progress, to retry later."""


@contextmanager
def engine_transaction() -> Iterator[EngineTransaction]:
    """The engine's transaction around a view (used by ``engine._execute``); raises
    :class:`WriterBusy` when it cannot begin for SQLite's lock. A lock error once it began
    (a deferred transaction's first write, its commit) is not one: the view may have run."""
    began = False
    try:
        with own_transaction() as tx:
            began = True
            token = _in_engine_transaction.set(True)
            try:
                yield tx
            finally:
                _in_engine_transaction.reset(token)
    except OperationalError as exc:
        if began or not _writer_lock_busy(exc):
            raise
        raise WriterBusy from exc


def _writer_lock_busy(exc: OperationalError) -> bool:
    return connection.vendor == "sqlite" and "database is locked" in str(exc)


def backend_vendor(engine: str) -> str | None:
    """The vendor of database backend ``engine`` (a ``DATABASES`` ``ENGINE``), as its
    connections will name it (``connection.vendor``, which the engine's statements follow),
    whatever the backend's module is called: GeoDjango's ``spatialite`` is ``sqlite``, and
    ``postgis`` is ``postgresql``. None when the backend cannot be loaded (its driver is
    missing: Django names that itself)."""
    try:
        return load_backend(engine).DatabaseWrapper.vendor
    except (ImportError, ImproperlyConfigured):
        return None
