"""The business transaction, as the engine and the host application's services share it.

The engine runs a view inside its own transaction, so that the idempotency record commits
exactly with the business writes. A service that opens ``transaction.atomic()`` in there would
make Django create a savepoint (two more round trips per request) that the engine does not
need: a refusal raised after some writes dooms the whole transaction, and the engine records
the refusal on its own after the rollback (``engine._execute``). Services therefore open their
transaction with :func:`business_atomic`: a savepoint everywhere else (a caller that catches
the error keeps its transaction usable), none inside the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import connection, transaction

_in_engine_transaction: ContextVar[bool] = ContextVar("in_engine_transaction", default=False)


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


def statements_ride_along() -> bool:
    """Whether one query may hold several statements, sent in one round trip: on PostgreSQL
    through psycopg 3's client-side binding cursor (Django's default), which sends a query with
    the simple protocol. psycopg2 tracks the transaction itself and a server-side binding
    cursor sends one statement per query: each statement then goes on its own."""
    if connection.vendor != "postgresql":
        return False
    try:
        from psycopg import ClientCursor
    except ImportError:
        return False
    factory = getattr(connection.connection, "cursor_factory", None)
    return isinstance(factory, type) and issubclass(factory, ClientCursor)


def business_atomic() -> transaction.Atomic:
    return transaction.atomic(savepoint=not _in_engine_transaction.get())


@contextmanager
def engine_transaction() -> Iterator[EngineTransaction]:
    """The engine's transaction around a view (used by ``engine._execute``)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        token = _in_engine_transaction.set(True)
        try:
            yield EngineTransaction(outermost=outermost)
        finally:
            _in_engine_transaction.reset(token)
