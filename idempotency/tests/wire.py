"""What Django's PostgreSQL connection really sends: libpq's protocol trace of it (tests, and
the per-request counts of ``bench/http_load.py``).

Django's query log shows what Django asked for; a ``COMMIT`` that psycopg had nothing to send
for still appears there, and psycopg's own ``BEGIN`` or the connection's health check do not.
The trace shows the messages that went over the wire."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from psycopg import pq


@contextmanager
def queries_sent() -> Iterator[list[str]]:
    """The text of every simple-protocol ``Query`` message sent inside the block (filled in
    when the block ends)."""
    with _messages_sent(("Query",)) as sent:
        yield sent


@contextmanager
def round_trips_sent() -> Iterator[list[str]]:
    """One entry per round trip to the server inside the block (filled in when the block
    ends): a simple-protocol ``Query`` (its text; several statements in it are one round
    trip), or the ``Sync`` that ends an extended-protocol exchange (``"Sync"``)."""
    with _messages_sent(("Query", "Sync")) as sent:
        yield sent


@contextmanager
def _messages_sent(kinds: tuple[str, ...]) -> Iterator[list[str]]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    sent: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield sent
        finally:
            pgconn.untrace()
            trace.seek(0)
            for line in trace:
                direction, _, kind, *text = line.rstrip("\n").split("\t")
                if direction == "F" and kind in kinds:
                    sent.append("\t".join(text).strip().strip('"') if text else kind)
