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
from tests.observability.test_metrics import value
from tests.support.auth import diner_token
from tests.support.live_server import LiveServer, live_gunicorn
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode
from tests.support.slow_proxy import SlowProxy
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

METRICS_TOKEN = "faults-metrics-token"
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


def serve(redis_url: str, tmp_path, breaker: dict = BREAKER) -> object:
    return live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path,
        env={
            "REDIS_URL": redis_url,
            "IDEMPOTENCY_BREAKER": json.dumps(breaker),
            "METRICS_TOKEN": METRICS_TOKEN,
        },
    )


def breaker_state(server: LiveServer, redis_url: str) -> float:
    """The node's breaker as ``/metrics`` reports it: the worst of every worker's (0 closed,
    1 half-open, 2 open)."""
    body = httpx.get(
        f"{server.url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
        timeout=DEADLINE_SECONDS,
    ).text
    node = redis_url.removeprefix("redis://")
    return value(body, "idempotency_breaker_state", node=node)


def wait_for_closed_breakers(server: LiveServer, redis_url: str, probe) -> None:
    """Send ``probe()`` (requests whose claims are the breakers' half-open probes) until every
    worker's breaker for the node is closed again."""

    def closed() -> bool:
        probe()
        return breaker_state(server, redis_url) == 0

    wait_until(closed, what="every worker's breaker closed", interval=0.2)


async def _post_orders(
    server: LiveServer, shop, keys: list[str], concurrency: int, answered=lambda: None
):
    _, dish, token = shop
    headers = {"Authorization": f"Bearer {token}"}
    body = {"items": [{"dish_id": dish.pk, "quantity": 1}], "payment_method": "card"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=server.url, timeout=DEADLINE_SECONDS, limits=limits
    ) as client:

        async def one(key: str) -> tuple[httpx.Response, float]:
            async with gate:
                started = time.perf_counter()
                r = await client.post(
                    "/api/v1/orders/", json=body, headers={**headers, "Idempotency-Key": key}
                )
                answered()
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
            # the node dies once 10 of the 80 were answered: the rest are in flight or to come
            ten_answered = asyncio.Event()
            count = iter(range(1, len(during) + 1))

            def answered() -> None:
                if next(count) == 10:
                    ten_answered.set()

            task = asyncio.create_task(_post_orders(server, shop, during, 8, answered))
            await ten_answered.wait()
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
        replayed = before[:8]
        wait_for_closed_breakers(server, node.url, lambda: post_orders(server, shop, replayed, 4))
        after = new_keys(30, "after")
        assert {r.status_code for r, _ in post_orders(server, shop, after, 4)} == {201}
        # then the breakers closed (new keys are in Redis again) and replays still work
        redis_keys = list(node.client().scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
        assert len(redis_keys) >= 30
        replays = post_orders(server, shop, before[:5] + during[-5:] + ["outage-storm"])
        assert {r.headers["X-Idempotent-Result"] for r, _ in replays} == {"HIT"}
        assert Order.objects.for_tenant(tenant).count() == 40 + 80 + 1 + 30
        assert IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk)).count() == 151


# A slow node: every command held 1.5 s, far over a 1 s p99 threshold that a busy machine's
# healthy loopback round trips stay under; a breaker stays open 10 s before it probes again.
SLOW_BREAKER = {**BREAKER, "p99_threshold_ms": 1000, "open_seconds": 10}
SLOW_SECONDS = 1.5


def test_slow_node_opens_the_breaker_and_recovers(node, shop, tmp_path):
    """Judged by what reaches the node (the proxy counts every client chunk) and by the
    breaker state in ``/metrics``, never by how long a request took."""
    tenant, _, _ = shop
    proxy = SlowProxy(node.port)
    placed = 0

    def place(n: int, prefix: str, concurrency: int = 4) -> list[httpx.Response]:
        nonlocal placed
        answers = [r for r, _ in post_orders(server, shop, new_keys(n, prefix), concurrency)]
        assert {r.status_code for r in answers} == {201}
        placed += n
        return answers

    try:
        with serve(proxy.url, tmp_path, SLOW_BREAKER) as server:
            # given a healthy node: every first execution talks to Redis (claim + finish)
            assert breaker_state(server, proxy.url) == 0
            chunks = proxy.chunks
            place(20, "ok")
            healthy_per_request = (proxy.chunks - chunks) / 20
            assert healthy_per_request >= 2
            # when the node becomes slow, orders keep succeeding, and the breakers open: a
            # batch of orders then sends the node less than half of what healthy ones send
            # (what still reaches it: heartbeats, lease renewals, the listeners' pings)
            proxy.delay = SLOW_SECONDS

            def batch_bypasses_redis() -> bool:
                before = proxy.chunks
                place(8, "slow")
                return (proxy.chunks - before) / 8 < healthy_per_request / 2

            wait_until(batch_bypasses_redis, what="orders no longer waiting on the slow node")
            assert breaker_state(server, proxy.url) == 2
            # when the node is healthy again, the probes close every worker's breaker
            proxy.delay = 0.0
            wait_for_closed_breakers(server, proxy.url, lambda: place(2, "probe", 2))
            # then orders talk to Redis again (a claim and a finish each)
            chunks = proxy.chunks
            place(20, "healed", 2)
            assert proxy.chunks - chunks >= 36
        assert Order.objects.for_tenant(tenant).count() == placed
    finally:
        proxy.close()


# A node that trickles its replies: each read gets a byte well within the 1 s socket timeout,
# a whole reply (a claim's is some 14 bytes) takes seconds.
TRICKLE_SECONDS = 0.3


def test_node_trickling_its_replies_opens_the_breaker_and_recovers(node, shop, tmp_path):
    """redis-py's socket timeout bounds each read, not a reply: a node that trickled its
    replies held every call for as long as it trickled, gunicorn killed the workers at their
    timeout with the call unfinished, and no breaker ever heard of it. Every reply is now read
    within the socket timeout (``idempotency/stores/reply_deadline.py``)."""
    tenant, _, _ = shop
    proxy = SlowProxy(node.port)
    placed = 0

    def place(n: int, prefix: str, concurrency: int = 4) -> None:
        nonlocal placed
        answers = [r for r, _ in post_orders(server, shop, new_keys(n, prefix), concurrency)]
        assert {r.status_code for r in answers} == {201}
        placed += n

    try:
        with serve(proxy.url, tmp_path, SLOW_BREAKER) as server:
            # given orders flowing through a healthy node
            place(8, "ok")
            # when the node trickles its replies, every order is still answered, and the
            # breakers open: the node's tenants run database-only
            proxy.trickle = TRICKLE_SECONDS
            place(16, "trickled")
            assert breaker_state(server, proxy.url) == 2
            # when the node answers promptly again, the probes close every worker's breaker
            proxy.trickle = 0.0
            wait_for_closed_breakers(server, proxy.url, lambda: place(2, "probe", 2))
            place(8, "healed", 2)
        assert Order.objects.for_tenant(tenant).count() == placed
    finally:
        proxy.close()


# Ways a node that is up refuses the engine's writes: demoted to a replica (of a master that
# is not there: READONLY), or full with nothing it may evict (OOM).
# Each with the words of Redis's refusal that a log line names (redis-py drops the error code).
REFUSALS = {
    "read-only replica": (
        lambda client: client.replicaof("127.0.0.1", free_port()),
        "read only replica",
    ),
    "out of memory": (lambda client: client.config_set("maxmemory", 1), "maxmemory"),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_a_node_refusing_writes_is_logged_in_lines_not_a_traceback_per_request(
    node, shop, tmp_path, refusal
):
    """A node that answers but refuses is no bug of ours, any more than one that is gone: each
    failed call is one line naming what Redis said, as for a node that cannot be reached (a
    traceback per request and per call flooded the log for as long as the node refused)."""
    tenant, _, _ = shop
    with serve(node.url, tmp_path) as server:
        assert {r.status_code for r, _ in post_orders(server, shop, new_keys(8, "ok"))} == {201}
        # when the node refuses every write
        refuse, words = REFUSALS[refusal]
        refuse(node.client())
        # then orders are still placed, once each
        answers = post_orders(server, shop, new_keys(24, "refused"), 4)
        assert {r.status_code for r, _ in answers} == {201}
        assert Order.objects.for_tenant(tenant).count() == 8 + 24
        # and the log says so in lines, with no traceback
        log = server.log_path.read_text()
        claims = [line for line in log.splitlines() if "Redis claim failed" in line]
        assert claims
        assert all(words in line for line in claims)
        assert "Traceback" not in log


def test_a_breaker_held_open_by_a_dead_node_stays_open_for_scrapes_and_probes(node, shop, tmp_path):
    """What only reports on a node (a scrape, a readiness probe) leaves its breaker as it is.
    Reading the breaker moved an open one whose ``open_seconds`` had passed on to half-open,
    and its gauge with it: with the node still dead and no request probing it, the next
    scrape read 1, and the page RedisBreakerOpen (``== 2``) resolved during the outage. One
    worker, so that every scrape and probe reads the same breaker."""
    breaker = {**BREAKER, "open_seconds": 1}
    env = {
        "REDIS_URL": node.url,
        "IDEMPOTENCY_BREAKER": json.dumps(breaker),
        "METRICS_TOKEN": METRICS_TOKEN,
    }
    db_name = settings.DATABASES["default"]["NAME"]
    with live_gunicorn(db_name=db_name, log_dir=tmp_path, env=env, workers=1) as server:
        # given a node that died under orders, and the worker's breaker open
        post_orders(server, shop, new_keys(4, "before"), concurrency=2)
        node.stop()
        wait_until(
            lambda: (
                post_orders(server, shop, new_keys(4, "during"), 2)
                and breaker_state(server, node.url) == 2
            ),
            what="the breaker open",
        )
        # when its open_seconds pass with no order to probe the node, and it is only watched
        time.sleep(breaker["open_seconds"] + 0.5)
        observed = []
        for _ in range(3):
            httpx.get(f"{server.url}/readyz", timeout=DEADLINE_SECONDS)
            observed.append(breaker_state(server, node.url))
        # then every scrape reads it open, as it is: nothing has probed the dead node
        assert observed == [2, 2, 2]
        # and an order still probes it (and opens the breaker again, the node being dead)
        assert {r.status_code for r, _ in post_orders(server, shop, new_keys(2, "probe"), 1)} == {
            201
        }
        assert breaker_state(server, node.url) == 2
