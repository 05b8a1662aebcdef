"""Redis faults under a live multi-process server: a node killed, slowed, and restarted.

The promise: no request fails because of Redis, duplicates still execute once (the database
layer takes over), and the engine goes back to Redis when the node is healthy again.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest
from django.conf import settings

from idempotency.models import IdempotencyRecord
from ordering.models import Dish, Order
from tenants.models import Tenant
from tests.support.auth import diner_token
from tests.support.live_server import LiveServer, live_gunicorn
from tests.support.redis_nodes import RedisNode
from tests.support.slow_proxy import SlowProxy

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BREAKER = {"min_calls": 5, "open_seconds": 2, "p99_threshold_ms": 200, "window_seconds": 10}


@pytest.fixture
def node() -> Iterator[RedisNode]:
    node = RedisNode().start()
    yield node
    node.remove()


@pytest.fixture
def shop(transactional_db: None) -> tuple[Tenant, Dish, str]:
    tenant = Tenant.objects.create(slug="faulty", name="Faulty Pizza")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=10_000
    )
    return tenant, dish, diner_token(tenant, "d1")


def serve(redis_url: str, tmp_path) -> object:
    return live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path,
        env={"REDIS_URL": redis_url, "IDEMPOTENCY_BREAKER": json.dumps(BREAKER)},
    )


async def _post_orders(server: LiveServer, shop, keys: list[str], concurrency: int):
    _, dish, token = shop
    headers = {"Authorization": f"Bearer {token}"}
    body = {"items": [{"dish_id": dish.pk, "quantity": 1}], "payment_method": "card"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:

        async def one(key: str) -> tuple[httpx.Response, float]:
            async with gate:
                started = time.perf_counter()
                r = await client.post(
                    "/api/v1/orders/", json=body, headers={**headers, "Idempotency-Key": key}
                )
                return r, time.perf_counter() - started

        return await asyncio.gather(*(one(k) for k in keys))


def post_orders(server, shop, keys, concurrency=8) -> list[tuple[httpx.Response, float]]:
    return asyncio.run(_post_orders(server, shop, keys, concurrency))


def new_keys(n: int, prefix: str) -> list[str]:
    return [f"{prefix}-{uuid.uuid4().hex[:12]}" for _ in range(n)]


def test_node_killed_during_orders_then_restarted(node, shop, tmp_path):
    tenant, dish, _ = shop
    with serve(node.url, tmp_path) as server:
        # given orders flowing through Redis
        before = new_keys(40, "before")
        assert {r.status_code for r, _ in post_orders(server, shop, before)} == {201}
        assert any(node.client().scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
        # when the node dies in the middle of a run of concurrent orders
        during = new_keys(80, "during")

        async def run_and_kill():
            task = asyncio.create_task(_post_orders(server, shop, during, 8))
            await asyncio.sleep(0.3)
            node.stop()
            return await task

        results = asyncio.run(run_and_kill())
        # then no request failed because of Redis
        assert sorted({r.status_code for r, _ in results}) == [201]
        # and a same-key storm during the outage still makes one order
        storm = post_orders(server, shop, ["outage-storm"] * 32, concurrency=32)
        statuses = [r.status_code for r, _ in storm]
        assert set(statuses) <= {201, 409} and statuses.count(201) >= 1
        storm_bodies = {r.content for r, _ in storm if r.status_code == 201}
        assert len(storm_bodies) == 1
        assert Order.objects.for_tenant(tenant).count() == 40 + 80 + 1
        dish.refresh_from_db()
        assert dish.stock == 10_000 - 121
        # when the node comes back (empty: it lost everything)
        node.start()
        time.sleep(BREAKER["open_seconds"] + 0.5)
        after = new_keys(30, "after")
        assert {r.status_code for r, _ in post_orders(server, shop, after, 4)} == {201}
        # then the breakers closed (new keys are in Redis again) and replays still work
        redis_keys = list(node.client().scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
        assert len(redis_keys) >= 20
        replays = post_orders(server, shop, before[:5] + during[-5:] + ["outage-storm"])
        assert {r.headers["X-Idempotent-Result"] for r, _ in replays} == {"HIT"}
        assert Order.objects.for_tenant(tenant).count() == 40 + 80 + 1 + 30
        assert IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk)).count() == 151


def test_slow_node_opens_the_breaker_and_recovers(node, shop, tmp_path):
    tenant, _, _ = shop
    proxy = SlowProxy(node.port)
    try:
        with serve(proxy.url, tmp_path) as server:
            # given a healthy node: every first execution talks to Redis (claim + finish)
            chunks = proxy.chunks
            assert {r.status_code for r, _ in post_orders(server, shop, new_keys(20, "ok"))} == {
                201
            }
            healthy_per_request = (proxy.chunks - chunks) / 20
            assert healthy_per_request >= 2
            # when the node becomes slow (every command 300 ms)
            proxy.delay = 0.3
            slowed = post_orders(server, shop, new_keys(80, "slow"), concurrency=4)
            assert {r.status_code for r, _ in slowed} == {201}
            # then the breakers open: the last requests no longer wait for Redis, and hardly
            # touch it (only half-open probes and the listeners' pings)
            tail = slowed[-40:]
            slow_tail = [t for _, t in tail if t >= proxy.delay]
            assert len(slow_tail) <= 8, [round(t, 3) for _, t in tail]
            # (what still reaches it: a half-open probe per process every open_seconds,
            # heartbeats, lease renewals, pings: less than half of what healthy requests send)
            chunks = proxy.chunks
            post_orders(server, shop, new_keys(40, "open"), concurrency=4)
            assert (proxy.chunks - chunks) / 40 < healthy_per_request / 2
            # when the node is healthy again, the probes close the breakers
            proxy.delay = 0.0
            time.sleep(BREAKER["open_seconds"] + 0.5)
            post_orders(server, shop, new_keys(20, "probe"), concurrency=2)
            chunks = proxy.chunks
            healed = post_orders(server, shop, new_keys(20, "healed"), concurrency=2)
            assert {r.status_code for r, _ in healed} == {201}
            assert proxy.chunks - chunks >= 36
        assert Order.objects.for_tenant(tenant).count() == 180
    finally:
        proxy.close()
