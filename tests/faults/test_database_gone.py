"""PostgreSQL unreachable under a live server: 503 ``DATABASE_UNAVAILABLE``, and the key retryable.

The server reaches the real test database through a TCP proxy that the test cuts (every
connection dropped, each new one closed as soon as it is accepted: a database that is down) and
heals. A write the outage caught was answered 500 ``SERVER_ERROR``, "a bug on our side"; it is
503 with ``Retry-After``, and the same key, retried once the database is back, places the order
once (config/database_unavailable.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from ordering_client import OrderingClient, RetryEvent

from ordering.models import Dish, Order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.support import view_executions
from tests.support.auth import bearer, diner_token
from tests.support.live_server import LiveServer, live_gunicorn
from tests.support.slow_proxy import SlowProxy
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBLEM_JSON = "application/problem+json"


@pytest.fixture
def shop(transactional_db: None) -> tuple[Tenant, Dish, str]:
    tenant = Tenant.objects.create(slug="unplugged", name="Unplugged Pizza")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=100
    )
    return tenant, dish, diner_token(tenant, "d1")


@pytest.fixture
def database_proxy() -> Iterator[SlowProxy]:
    proxy = SlowProxy(int(settings.DATABASES["default"]["PORT"]))
    yield proxy
    proxy.close()


@pytest.fixture
def server(database_proxy: SlowProxy, tmp_path: Path) -> Iterator[LiveServer]:
    """A server whose views, once they run, are held until the file ``gate`` exists."""
    database = settings.DATABASES["default"]
    url = f"postgres://{database['USER']}@127.0.0.1:{database_proxy.port}/{database['NAME']}"
    with live_gunicorn(
        db_name=database["NAME"],
        log_dir=tmp_path,
        workers=2,
        env={
            "DATABASE_URL": url,
            "REDIS_URL": settings.REDIS_URL,
            **view_executions.server_env(tmp_path / "executions", gate=tmp_path / "gate"),
        },
    ) as server:
        yield server


def test_a_write_while_the_database_is_down_is_503_and_its_key_places_the_order_once(
    shop: tuple[Tenant, Dish, str], database_proxy: SlowProxy, server: LiveServer, tmp_path: Path
) -> None:
    """The database goes while the order's view runs, under the key's Redis claim: the engine
    releases the claim, and the answer is 503, not 500. A write sent while it is down is
    refused the same way before anything runs. The key's retry, the database back, runs the
    view again (nothing was kept) and places one order."""
    tenant, dish, token = shop
    key = f"gone-{uuid.uuid4()}"
    headers = {**bearer(token), "Idempotency-Key": key}
    body = {"items": [{"dish_id": dish.pk, "quantity": 1}], "payment_method": "card"}
    log = tmp_path / "executions"
    with (
        httpx.Client(base_url=server.url, timeout=DEADLINE_SECONDS) as client,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        sent = pool.submit(client.post, "/api/v1/orders/", json=body, headers=headers)
        wait_until(lambda: view_executions.executions(log, key=key), what="the order's view to run")
        database_proxy.cut()
        (tmp_path / "gate").touch()
        held = sent.result(timeout=DEADLINE_SECONDS)
        other = client.post(
            "/api/v1/orders/", json=body, headers={**bearer(token), "Idempotency-Key": "other"}
        )
        database_proxy.heal()
        retried = client.post("/api/v1/orders/", json=body, headers=headers)
        replayed = client.post("/api/v1/orders/", json=body, headers=headers)

    for down in (held, other):
        assert down.status_code == 503, down.text
        assert down.headers["Content-Type"] == PROBLEM_JSON
        assert down.headers["Retry-After"] == "5"
        assert down.json()["code"] == "DATABASE_UNAVAILABLE"
        assert "X-Idempotent-Result" not in down.headers
    # nothing was kept for the key: the retry runs the view again (MISS, not 409 in progress
    # nor a replayed 503), and places the one order
    assert (retried.status_code, retried.headers["X-Idempotent-Result"]) == (201, "MISS")
    assert len(view_executions.executions(log, key=key)) == 2
    assert (replayed.status_code, replayed.headers["X-Idempotent-Result"]) == (201, "HIT")
    assert replayed.content == retried.content
    assert Order.objects.for_tenant(tenant).count() == 1


def test_the_python_client_waits_out_the_outage_and_orders_once(
    shop: tuple[Tenant, Dish, str], database_proxy: SlowProxy, server: LiveServer, tmp_path: Path
) -> None:
    """The client library retries a 503 with the same key, no sooner than its Retry-After:
    the database comes back while it waits, and the call returns the one order."""
    tenant, dish, _ = shop
    (tmp_path / "gate").touch()  # no view is held here
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    retries: list[RetryEvent] = []

    def database_back(event: RetryEvent) -> None:
        retries.append(event)
        database_proxy.heal()

    with OrderingClient(server.url, publishable, on_retry=database_back) as client:
        client.session()  # a guest session, opened while the database answers
        database_proxy.cut()
        placed = client.place_order(
            {"items": [{"dish_id": dish.pk, "quantity": 1}], "payment_method": "card"}
        )

    assert [(e.status, e.code, e.retry_after) for e in retries] == [
        (503, "DATABASE_UNAVAILABLE", 5.0)
    ]
    assert retries[0].delay >= 5.0
    assert placed.status == 201
    assert Order.objects.for_tenant(tenant).count() == 1
