"""Django's PostgreSQL backend (psycopg 3), with a health check that costs no round trip.

Workers keep their connection between requests and check it before the first query of each
request (``CONN_HEALTH_CHECKS``, ADR 0006). Django checks with a ``SELECT 1``: one round trip,
and PostgreSQL CPU, on every request that touches the database — a bare one-row create makes
two round trips instead of one, and behind PgBouncer in transaction mode every check takes a
server connection for its statement.

An idle connection needs no query to tell whether it still works. Between requests nothing
arrives on it (the app does not ``LISTEN``), while a server that ends the session — a restart,
``pg_terminate_backend``, PgBouncer dropping its client — first sends its error and closes the
socket: the socket has something to read. So a connection that libpq knows to be open and
idle, with no error since its last transaction and nothing to read, is usable; anything else
(something to read, an error since the last commit or rollback, a transaction left open) is
decided as Django decides it. What neither check can see is a server that vanished without
closing (power loss, a partition): the request's first query then fails, as it would a moment
after a ``SELECT 1`` succeeded.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.connection is None or self.errors_occurred:
            return super().is_usable()
        pgconn = self.connection.pgconn
        if pgconn.transaction_status != TransactionStatus.IDLE:
            # in a transaction, or not open (libpq then reports UNKNOWN): the query decides
            return super().is_usable()
        return not _has_input(pgconn.socket)


def _has_input(fd: int) -> bool:
    """Whether the socket has something to read (or was closed), without waiting."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
