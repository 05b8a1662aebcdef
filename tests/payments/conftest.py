"""Payment tests run Celery tasks eagerly (in the test process, right after the commit that
schedules them): they test the webhook, not the broker (that is tests/workers/)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _tasks_run_eagerly(celery_eager: None) -> None:
    """Every test here takes the root conftest's ``celery_eager``."""
