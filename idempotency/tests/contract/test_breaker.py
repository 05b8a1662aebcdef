"""The circuit breaker: Redis down means database-only, never duplicates; Redis back, it closes.

A real ``redis-server`` of the test's own is stopped and started again on the same port.
"""

from __future__ import annotations

import time

import pytest
import redis
from django.test import Client

from idempotency.management.sandbox import ephemeral_redis
from idempotency.stores import nodes
from idempotency.tests.conftest import post_note
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db

BREAKER = {"min_calls": 3, "error_rate_threshold": 0.5, "open_seconds": 0.5, "probes_to_close": 1}


def only_state() -> str:
    [state] = nodes.breaker_states().values()
    return state


def test_redis_down_opens_the_breaker_and_the_database_keeps_the_contract(settings, tenant):
    with ephemeral_redis() as node:
        port = node.port
        settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": node.url, "BREAKER": BREAKER}
        nodes.reset()
        assert post_note(Client(), tenant, key="before", text="a").status_code == 201
        assert only_state() == "closed"
    # Redis is gone: every write still executes once, and retries replay from the database
    firsts = [post_note(Client(), tenant, key=f"down-{n}", text=f"d{n}") for n in range(4)]
    assert [r.status_code for r in firsts] == [201] * 4
    assert only_state() == "open"
    retry = post_note(Client(), tenant, key="down-0", text="d0")
    assert retry["X-Idempotent-Result"] == "HIT" and retry.content == firsts[0].content
    assert Note.objects.count() == 5
    # Redis is back on the same port: after open_seconds a probe succeeds and the breaker closes
    with ephemeral_redis(port=port) as node:
        deadline = time.monotonic() + 30
        n = 0
        while only_state() != "closed" and time.monotonic() < deadline:
            time.sleep(0.1)
            n += 1
            assert post_note(Client(), tenant, key=f"up-{n}", text=f"u{n}").status_code == 201
        assert only_state() == "closed"
        assert list(redis.Redis(port=node.port).scan_iter(match="idem:*"))  # Redis in use again
    assert Note.objects.count() == 5 + n


def test_redis_down_is_a_line_per_request_not_a_traceback(settings, tenant, caplog):
    # every request says it while the node is down (until the breaker opens, and each probe
    # after): a traceback each flooded the log
    with ephemeral_redis() as node:
        settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": node.url}
        nodes.reset()
    with caplog.at_level("WARNING", logger="idempotency.core.engine"):
        assert post_note(Client(), tenant, key="down", text="a").status_code == 201
    [failed] = [r for r in caplog.records if r.getMessage().startswith("Redis claim failed")]
    assert "answering from the database" in failed.getMessage() and not failed.exc_info
