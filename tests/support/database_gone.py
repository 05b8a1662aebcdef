"""PostgreSQL gone, for a test in this process: this thread's queries go to a loopback port that
nothing listens on (the connection is refused, as when the server is down), while the test's
own connection, its transaction included, waits aside and is put back afterwards. Nothing is
faked: the driver really connects, and really fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections

from tests.support.ports import free_port


@contextmanager
def database_unreachable() -> Iterator[None]:
    held = connections[DEFAULT_DB_ALIAS]
    gone = held.copy()  # its own settings: the test's connection keeps its port
    gone.settings_dict["PORT"] = str(free_port())
    connections[DEFAULT_DB_ALIAS] = gone
    try:
        yield
    finally:
        gone.close()
        connections[DEFAULT_DB_ALIAS] = held


@contextmanager
def session_ended_before(marker: str) -> Iterator[None]:
    """The server ends this thread's session just before the first statement whose SQL holds
    ``marker`` (``pg_terminate_backend``, as a restart or a failover ends every session), so
    that statement really fails on the ended session. What ran before it, a commit included,
    stands. The ended session is closed afterwards, as the end of a request closes it in a
    server (the test client leaves that to the test), so the test's next query reconnects."""
    ended: list[bool] = []

    def end_session_first(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if not ended and marker in sql:
            ended.append(True)
            pid = context["connection"].connection.info.backend_pid
            other = connections[DEFAULT_DB_ALIAS].copy()
            try:
                with other.cursor() as cursor:
                    cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
            finally:
                other.close()
        return execute(sql, params, many, context)

    try:
        with connections[DEFAULT_DB_ALIAS].execute_wrapper(end_session_first):
            yield
    finally:
        connections[DEFAULT_DB_ALIAS].close_if_unusable_or_obsolete()
    assert ended, f"no statement held {marker!r}"
