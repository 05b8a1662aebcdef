"""What Django's PostgreSQL connection really sends: libpq's protocol trace of it (tests).

Django's query log shows what Django asked for; a ``COMMIT`` that psycopg had nothing to send
for still appears there. The trace shows the messages that went over the wire."""

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
                if direction == "F" and kind == "Query":
                    sent.append("\t".join(text).strip().strip('"'))
