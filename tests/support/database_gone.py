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
