"""The project's Celery app pointed at a broker of a test's, for tests of what a send meets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kombu import pools

from config.celery import app


@contextmanager
def sending_to(url: str) -> Iterator[None]:
    """Tasks are sent to ``url`` (not run eagerly) inside the block; the app's own broker and
    mode, and fresh connection pools, afterwards. kombu keeps its pools per broker URL for the
    process: closed and left there, the pool of ``url`` answered "Acquire on closed pool" to
    the next block sending to the same URL (a later test's Redis on a port an earlier test had
    used), so they are closed and dropped (``kombu.pools.reset``)."""
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url, app.conf.task_always_eager = url, False
    app.amqp._producer_pool = None
    app._pool = None
    try:
        yield
    finally:
        pools.reset()
        app.conf.broker_url, app.conf.task_always_eager = saved
        app.amqp._producer_pool = None
        app._pool = None
