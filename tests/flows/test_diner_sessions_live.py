"""Diner sessions against a live gunicorn (4 worker processes, Redis + database): the tenant's
write ceiling under rotating sessions, scopes between sessions, and revocation reaching every
worker within the state cache's bound.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest
from django.conf import settings

from ordering.models import Order
from tests.flows.conftest import Shop
from tests.flows.test_storm import Call, fire, order_body
from tests.support.live_server import LiveServer
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ORDERS = "/api/v1/orders/"


def post_order(shop: Shop, diner: str, key: str) -> Call:
    return Call(ORDERS, {**shop.headers(diner=diner), "Idempotency-Key": key}, order_body(shop))


def test_the_tenant_ceiling_holds_under_8_rotating_sessions(
    live_gunicorn_redis: LiveServer, shop: Shop
) -> None:
    """8 diners (8 sessions, 8 principals with a budget of 600 each) write at once against a
    tenant ceiling of 20 per minute: exactly 20 writes get through, whichever diner sent them."""
    shop.tenant.write_ceiling_per_minute = 20
    shop.tenant.save(update_fields=["write_ceiling_per_minute"])
    calls = [
        post_order(shop, diner=f"rotating-{i % 8}", key=f"ceiling-{i}")
        for i in range(80)  # 10 per session, interleaved
    ]
    responses = fire(live_gunicorn_redis, calls)
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 20, 429: 60}, statuses
    refused = [r for r in responses if r.status_code == 429]
    assert {r.json()["code"] for r in refused} == {"RATE_LIMITED"}
    assert all("ceiling" in r.json()["detail"] for r in refused)
    assert Order.objects.for_tenant(shop.tenant).count() == 20
    served_by = {line.pid for line in live_gunicorn_redis.access_log() if line.path == ORDERS}
    assert len(served_by) >= 2  # the ceiling is shared across processes, not per process


def test_session_a_cannot_see_or_replay_session_bs_results(
    live_gunicorn_redis: LiveServer, shop: Shop
) -> None:
    """The same Idempotency-Key from two diners, at once: two executions, two orders; neither
    can read the other's."""
    diners = ["diner-a", "diner-b"] * 8
    calls = [post_order(shop, diner=d, key="same-key") for d in diners]
    responses = fire(live_gunicorn_redis, calls)
    by_diner: dict[str, set[str]] = {"diner-a": set(), "diner-b": set()}
    for diner, r in zip(diners, responses, strict=True):
        assert r.status_code in (201, 409), r.text
        if r.status_code == 201:
            body = r.json()
            assert body["diner_id"] == diner
            by_diner[diner].add(body["id"])
    assert all(len(ids) == 1 for ids in by_diner.values()), by_diner
    a_order, b_order = by_diner["diner-a"].pop(), by_diner["diner-b"].pop()
    assert a_order != b_order
    assert Order.objects.for_tenant(shop.tenant).count() == 2
    a = shop.headers(diner="diner-a")
    r = httpx.get(
        f"{live_gunicorn_redis.url}{ORDERS}{b_order}/", headers=a, timeout=DEADLINE_SECONDS
    )
    assert (r.status_code, r.json()["code"]) == (404, "ORDER_NOT_FOUND")


def test_revoking_a_diner_reaches_every_worker_within_the_cache_bound(
    live_gunicorn_redis: LiveServer, shop: Shop
) -> None:
    bound = settings.DINER_SESSION_STATE_CACHE_SECONDS  # the server runs with the same default
    reads = [Call(ORDERS, shop.headers(diner="leaving"))] * 32

    def read_all() -> list[httpx.Response]:
        return _get_all(live_gunicorn_redis, reads)

    before = read_all()
    assert {r.status_code for r in before} == {200}  # every worker has the session cached now
    revoked = httpx.post(
        f"{live_gunicorn_redis.url}/api/v1/diners/leaving/revoke-sessions/",
        headers={"Authorization": f"Api-Key {shop.backend_key}"},
        timeout=DEADLINE_SECONDS,
    )
    assert revoked.json() == {"revoked": 1}
    time.sleep(bound + 0.1)
    after = read_all()
    assert {(r.status_code, r.json()["code"]) for r in after} == {(401, "SESSION_REVOKED")}
    pids = Counter(
        line.pid for line in live_gunicorn_redis.access_log()[-32:] if line.path == ORDERS
    )
    assert len(pids) >= 2, pids


def _get_all(server: LiveServer, calls: list[Call]) -> list[httpx.Response]:
    """GET every call at once, each on its own connection (any worker may take it)."""

    async def go() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(calls), max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=server.url, timeout=DEADLINE_SECONDS, limits=limits
        ) as client:
            return await asyncio.gather(*(client.get(c.path, headers=c.headers) for c in calls))

    return asyncio.run(go())
