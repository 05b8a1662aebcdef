"""Saga and outbox tests run Celery tasks eagerly (in the test process, right after the commit
that schedules them): they test the services, not the broker (that is tests/workers/)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def celery_eager() -> Iterator[None]:
    from config.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before
