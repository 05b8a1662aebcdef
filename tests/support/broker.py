"""The project's Celery app pointed at a broker of a test's, for tests of what a send meets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from config.celery import app


@contextmanager
def sending_to(url: str) -> Iterator[None]:
    """Tasks are sent to ``url`` (not run eagerly) inside the block; the app's own broker and
    mode, and fresh connection pools, afterwards."""
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url, app.conf.task_always_eager = url, False
    app.amqp._producer_pool = None
    app._pool = None
    try:
        yield
    finally:
        app.pool.force_close_all()
        app.conf.broker_url, app.conf.task_always_eager = saved
        app.amqp._producer_pool = None
        app._pool = None
