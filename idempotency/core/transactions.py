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

from django.db import transaction

_in_engine_transaction: ContextVar[bool] = ContextVar("in_engine_transaction", default=False)


def business_atomic() -> transaction.Atomic:
    return transaction.atomic(savepoint=not _in_engine_transaction.get())


@contextmanager
def engine_transaction() -> Iterator[None]:
    """The engine's transaction around a view (used by ``engine._execute``)."""
    with transaction.atomic():
        token = _in_engine_transaction.set(True)
        try:
            yield
        finally:
            _in_engine_transaction.reset(token)
