"""A flood of large invalid orders costs the server almost nothing to remember.

The attack: 200 orders whose ``payment_method`` was 500 KB each. The 400 answer echoed the whole
value, and the engine stored that answer as the key's final result in Redis (72 h), in the
database and in every gunicorn worker's local cache (bounded by entries, not bytes): about
105 MB of Redis, 107 MB of table and 135-200 MB of worker memory.

Now the error echoes a short prefix of the input, every stored reply has a byte cap and the local
cache a byte budget. The server is started as the README's production instructions say, with a
Redis of its own, so its memory figure is this test's alone.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings
from django.db import connection

from idempotency.core.keys import key_digest
from idempotency.models import IdempotencyRecord
from tests.flows.conftest import Shop
from tests.support.live_server import LiveServer, live_gunicorn
from tests.support.production import (
    HTTPS_HEADERS,
    documented_environment,
    guest_session_headers,
    live_server_environment,
)
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import DEADLINE_SECONDS

REQUESTS = 200
VALUE_BYTES = 500_000
WORKERS = 2
# Stated bounds for the whole flood (the unbounded server used 105 MB, 107 MB and 135-200 MB).
REDIS_GROWTH_LIMIT = 2 * 1024 * 1024
TABLE_GROWTH_LIMIT = 2 * 1024 * 1024
RSS_GROWTH_LIMIT = 40 * 1024 * 1024  # both workers together
# What the proxy in front of a production server sends along.
HEADERS = {"Host": documented_environment()["ALLOWED_HOSTS"].split(",")[0], **HTTPS_HEADERS}


@pytest.fixture
def own_redis() -> Iterator[RedisNode]:
    node = RedisNode().start()
    yield node
    node.remove()


@pytest.fixture
def flood_server(
    own_redis: RedisNode, django_db_setup: None, tmp_path: Path
) -> Iterator[LiveServer]:
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path,
        env={
            **live_server_environment(redis_url=own_redis.url),
            "API_WRITE_RATE_PER_MINUTE": "0",  # the flood is one diner's; measure, don't limit
        },
        workers=WORKERS,
        ready_headers=HEADERS,
    ) as server:
        yield server


def redis_used_bytes(node: RedisNode) -> int:
    return int(node.client().info("memory")["used_memory"])


def table_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [IdempotencyRecord._meta.db_table])
        return int(cursor.fetchone()[0])


def workers_rss_bytes(server: LiveServer) -> int:
    total = 0
    for pid in server.worker_pids:
        status = Path(f"/proc/{pid}/status").read_text()
        kilobytes = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        total += int(kilobytes.split()[1]) * 1024
    return total


def send_orders(server: LiveServer, shop: Shop, *, count: int, value_bytes: int, tag: str) -> set:
    """``count`` orders of one guest diner with a random (incompressible) ``payment_method`` of
    ``value_bytes``, each with its own key, eight at a time; the set of (status, code)
    answers."""
    with httpx.Client(base_url=server.url, headers=HEADERS, timeout=DEADLINE_SECONDS) as client:
        diner = guest_session_headers(client, shop.api_key)

    async def fire() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
        async with httpx.AsyncClient(
            base_url=server.url, limits=limits, timeout=DEADLINE_SECONDS, headers=HEADERS
        ) as client:
            gate = asyncio.Semaphore(8)

            async def one(i: int) -> httpx.Response:
                body = {
                    "items": [{"dish_id": shop.dish.pk, "quantity": 1}],
                    "payment_method": secrets.token_urlsafe(value_bytes)[:value_bytes],
                }
                headers = {**diner, "Idempotency-Key": f"{tag}-{i}"}
                async with gate:
                    return await client.post("/api/v1/orders/", json=body, headers=headers)

            return await asyncio.gather(*(one(i) for i in range(count)))

    return {(r.status_code, r.json()["code"]) for r in asyncio.run(fire())}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_200_orders_of_500_kb_leave_redis_table_and_workers_almost_unchanged(
    flood_server: LiveServer, own_redis: RedisNode, shop: Shop
) -> None:
    # Every worker has served the same kind of request before the baseline is taken, so the
    # growth measured is what the server keeps, not its allocator's first high-water mark.
    send_orders(flood_server, shop, count=16, value_bytes=VALUE_BYTES, tag="warm")
    redis_before, table_before = redis_used_bytes(own_redis), table_bytes()
    rss_before = workers_rss_bytes(flood_server)

    answers = send_orders(flood_server, shop, count=REQUESTS, value_bytes=VALUE_BYTES, tag="big")

    assert answers == {(400, "VALIDATION_ERROR")}
    big = {key_digest(f"big-{i}") for i in range(REQUESTS)}
    assert IdempotencyRecord.objects.filter(key__in=big).count() == REQUESTS
    redis_growth = redis_used_bytes(own_redis) - redis_before
    table_growth = table_bytes() - table_before
    rss_growth = workers_rss_bytes(flood_server) - rss_before
    print(f"growth: redis {redis_growth} B, table {table_growth} B, workers {rss_growth} B")
    assert redis_growth < REDIS_GROWTH_LIMIT
    assert table_growth < TABLE_GROWTH_LIMIT
    assert rss_growth < RSS_GROWTH_LIMIT
    assert redis.Redis.from_url(own_redis.url).dbsize() >= REQUESTS  # the replies are kept
