"""Run pieces of work at the same instant, each on its own thread and database connection, or
hold a change elsewhere until a request waits on it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any
from unittest import mock

from django.db import connection, connections, transaction

from tests.support.waiting import DEADLINE_SECONDS, wait_until


def at_once(*work: Callable[[], object], timeout: float = 60) -> list[object]:
    """Each callable's result, or the exception it raised, in the order given; the threads
    are released together by a barrier, and each closes its database connection."""
    barrier = threading.Barrier(len(work))
    results: list[object] = [None] * len(work)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results


def in_thread(work: Callable[[], object], into: list[object]) -> threading.Thread:
    """``work`` started on a thread of its own, its result (or the exception it raised)
    appended to ``into``; its database connections closed when it ends. Joined by the caller,
    which may meanwhile hold what ``work`` waits on."""

    def run() -> None:
        try:
            into.append(work())
        except Exception as exc:  # reported by the test
            into.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def waiting_on_me() -> int:
    """Locks other sessions wait for because this connection's transaction holds them (a
    row's lock, or its uncommitted write). Only those: the server's other databases (another
    test run's) have waiters of their own, which said "the request is waiting" before it was.
    Read from ``pg_locks``, live at every call; ``pg_stat_activity`` is read once per
    transaction, and the holder polls from inside its own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks"
            " WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        return cursor.fetchone()[0]


@contextmanager
def committed_once_waited_on(change: Callable[[], object]) -> Iterator[None]:
    """``change`` (a change elsewhere: on the dashboard, by another staff member) runs in a
    transaction of another thread, held until a request of the block waits on it, then
    committed: the block's request meets it at that instant."""
    made = threading.Event()

    def make() -> None:
        try:
            with transaction.atomic():
                change()
                made.set()
                wait_until(lambda: waiting_on_me() > 0, what="the request waiting on the change")
        finally:
            connection.close()

    elsewhere = threading.Thread(target=make)
    elsewhere.start()
    made.wait(DEADLINE_SECONDS)
    try:
        yield
    finally:
        elsewhere.join(DEADLINE_SECONDS)


@contextmanager
def password_checks_overlapping(at_once: int) -> Iterator[list[str]]:
    """Django's password check (``ModelBackend.authenticate``) recording the name each check
    is for, in the list yielded, and holding each check until ``at_once`` of them have begun
    (5 s at most), so checks nothing orders overlap fully: checks that take their turn run one
    at a time, each waiting alone until the timeout."""
    from django.contrib.auth.backends import ModelBackend

    checking = threading.Barrier(at_once, timeout=5)
    checked: list[str] = []
    authenticate = ModelBackend.authenticate

    def counted(backend: ModelBackend, request: Any, *args: Any, **kwargs: Any) -> Any:
        checked.append(kwargs.get("username", ""))
        with suppress(threading.BrokenBarrierError):
            checking.wait()
        return authenticate(backend, request, *args, **kwargs)

    with mock.patch.object(ModelBackend, "authenticate", counted):
        yield checked
