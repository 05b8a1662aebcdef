"""Waiting in tests: for an event, bounded by a deadline generous enough for a busy machine.

A test that needs something to have happened (a row committed by a worker, a breaker state in
``/metrics``, a key expired, a log line written) polls for exactly that. The deadline only
bounds how long a broken run takes to fail; it is never what makes a run pass, so it is long:
120 s by default, ``TEST_WAIT_SECONDS`` to change it. A fixed ``sleep`` is not a way to wait for
something to happen: on a machine running other work it is sometimes too short.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_SECONDS = float(os.environ.get("TEST_WAIT_SECONDS", "120"))


class WaitTimedOut(AssertionError):
    """The awaited event did not happen before the deadline."""


def wait_until(
    condition: Callable[[], T],
    *,
    what: str,
    timeout: float | None = None,
    interval: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Exceptions of the types in ``ignoring`` count as "not yet" (a server still starting).
    After ``timeout`` (default :data:`DEADLINE_SECONDS`) fail with ``what`` and ``detail()``.
    """
    limit = DEADLINE_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + limit
    while True:
        try:
            result = condition()
        except ignoring:
            result = None  # type: ignore[assignment]
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimedOut(f"{what}: not within {limit:.0f} s\n{detail()}")
        time.sleep(interval)


def row_lock_waiters() -> int:
    """Sessions of this test's database waiting for another transaction to end (a row it holds
    locked, or its uncommitted write under a unique index). Other databases' sessions are not
    counted: another test run on the same PostgreSQL (a second worker, another checkout) waits
    on locks of its own, which would make a test go on before its own request waits."""
    from django.db import connection

    with connection.cursor() as cursor:
        # pg_stat_activity is read once per transaction, and the caller may poll from one
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) "
            "WHERE pg_locks.locktype = 'transactionid' AND NOT pg_locks.granted "
            "AND pg_stat_activity.datname = current_database()"
        )
        return cursor.fetchone()[0]
