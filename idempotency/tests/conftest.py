"""Fixtures of the engine's suite: a clean engine per test, both engine modes, HTTP helpers."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.servers.basehttp import WSGIServer
from django.test import Client

from idempotency.core.ratelimit import reset_rate_cache
from idempotency.stores import nodes
from idempotency.stores.audit_stream import discard_all
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.scope import tenant_redaction
from idempotency.tests.testapp.views import behaviour


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: storms and sandboxed runs (left out by --quick)")
    # The live server's listen backlog: Django's is 10, and a storm opens its 24 connections
    # before it sends a request; on a busy machine the server thread had not accepted them
    # yet, the kernel's queue overflowed, and a connection was reset (seen in a full run).
    WSGIServer.request_queue_size = 128
    if not os.environ.get("IDEMPOTENCY_TEST_REDIS_URL"):
        raise pytest.UsageError(
            "set IDEMPOTENCY_TEST_REDIS_URL to a Redis database the engine's suite may empty of "
            "idem:* keys (and IDEMPOTENCY_TEST_DATABASE_URL to a PostgreSQL server)"
        )


def suite_redis() -> redis.Redis:
    """The Redis the suite's settings name (the Lua gate's ephemeral server, in the gate)."""
    return redis.Redis.from_url(settings.REDIS_URL)


def idem_keys(client: redis.Redis | None = None) -> list[bytes]:
    client = client or suite_redis()
    return list(client.scan_iter(match="idem:*", count=1000))


@pytest.fixture(autouse=True)
def clean_engine() -> Iterator[None]:
    """No idempotency state left over from another test: Redis keys, cached results, nodes and
    breakers, queued audits, rate lookups, view switches."""
    discard_all()
    keys = idem_keys()
    if keys:
        suite_redis().delete(*keys)
    nodes.reset()
    reset_rate_cache()
    behaviour.update(
        delay_seconds=0.0,
        hold=None,
        fail_once=set(),
        raise_once=set(),
        refuse_after_write=set(),
        refuse=set(),
        committed=[],
        chunks_sent=0,
    )
    executions.reset()
    tenant_redaction.clear()
    yield
    nodes.reset()
    discard_all()


@pytest.fixture(params=["redis", "database"])
def engine_mode(request: pytest.FixtureRequest, settings: Any) -> str:
    """Run a test with Redis + database, and database-only (``REDIS_URL: None``)."""
    if request.param == "database":
        settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": None}
    nodes.reset()
    return request.param


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def caller(tenant: str, principal: str = "alice") -> dict[str, str]:
    return {"HTTP_X_TENANT": tenant, "HTTP_X_PRINCIPAL": principal}


def post_note(
    client: Client, tenant: str, *, key: str | None, text: str = "hello", principal: str = "alice"
) -> Any:
    headers = caller(tenant, principal)
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return client.post("/notes/", {"text": text}, content_type="application/json", **headers)


def post_form(client: Client, tenant: str, *, token: str, text: str = "hello") -> Any:
    return client.post(
        "/notes/form/", {"text": text, "idempotency_key": token}, **caller(tenant, "alice")
    )
