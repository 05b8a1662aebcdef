"""The suite's workers keep to Redis databases of their own (tests/support/worker_redis.py)."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from tests.support.worker_redis import worker_redis_url


def test_each_worker_moves_two_databases_up_one_for_the_engine_one_for_its_broker() -> None:
    assert worker_redis_url("redis://127.0.0.1:6379/0", "gw0") == "redis://127.0.0.1:6379/0"
    assert worker_redis_url("redis://127.0.0.1:6379/0", "gw1") == "redis://127.0.0.1:6379/2"
    assert worker_redis_url("redis://127.0.0.1:6379/5", "gw3") == "redis://127.0.0.1:6379/11"
    assert worker_redis_url("redis://127.0.0.1:6379", "gw2") == "redis://127.0.0.1:6379/4"


def test_a_worker_past_the_last_database_is_refused() -> None:
    with pytest.raises(RuntimeError, match="too many test workers"):
        worker_redis_url("redis://127.0.0.1:6379/10", "gw3")


def test_this_worker_runs_on_its_own_databases() -> None:
    """In a worker, the settings (read after the plugin ran) name the worker's database, and
    the broker the one after it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or not os.environ.get("SUITE_REDIS_URL"):
        pytest.skip("not in a pytest-xdist worker of a suite with REDIS_URL")
    expected = worker_redis_url(os.environ["SUITE_REDIS_URL"], worker)
    assert expected == settings.REDIS_URL
    database = int(expected.rsplit("/", 1)[1])
    assert settings.CELERY_BROKER_URL.endswith(f"/{database + 1}")
