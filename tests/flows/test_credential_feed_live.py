"""Revocations reach every worker of another process within 1 s through the credential feed.

Two kinds of process: this test process revokes (a diner's sessions, an API key) through the
product's services; a live gunicorn (its own processes) serves the calls. The server runs
with ``DINER_SESSION_STATE_CACHE_SECONDS=60``, so its short fallback TTL cannot be what ends
the cached state within the second: only the pub/sub announcement can (and with
``GUNICORN_TIMEOUT=120``, without which a cache that long does not start).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest

from tenants.api_keys import issue_api_key, revoke_api_key
from tenants.diner_sessions import revoke_diner
from tenants.models import ApiClient
from tests.flows.conftest import ONE_REDIS_ENV, Shop
from tests.support.live_server import LiveServer, gunicorn_fixture
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ORDERS = "/api/v1/orders/"
BOUND_S = 1.0
READS = 24

live_gunicorn_long_ttl = gunicorn_fixture(
    "live_gunicorn_long_ttl",
    env={**ONE_REDIS_ENV, "DINER_SESSION_STATE_CACHE_SECONDS": "60", "GUNICORN_TIMEOUT": "120"},
    ready_timeout=90.0,  # a busy machine boots 4 workers slowly
)


def read_all(server: LiveServer, headers: dict[str, str]) -> list[httpx.Response]:
    """GET the orders READS times at once, each on its own connection (any worker takes it)."""

    async def go() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=READS, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=server.url, timeout=DEADLINE_SECONDS, limits=limits
        ) as client:
            calls = [client.get(ORDERS, headers=headers) for _ in range(READS)]
            return await asyncio.gather(*calls)

    return asyncio.run(go())


def cache_everywhere(server: LiveServer, headers: dict[str, str]) -> None:
    """Read until every worker has answered 200 at least twice (state cached and trusted)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        assert {r.status_code for r in read_all(server, headers)} == {200}
        pids = Counter(line.pid for line in server.access_log() if line.path == ORDERS)
        if set(pids) >= server.worker_pids and min(pids.values()) >= 2:
            return
        assert time.monotonic() < deadline, pids


@pytest.mark.parametrize("credential", ["diner session", "api key"])
def test_a_revocation_in_another_process_is_refused_by_every_worker_within_1s(
    live_gunicorn_long_ttl: LiveServer, shop: Shop, credential: str
) -> None:
    # given a credential whose state every worker of the server has cached
    if credential == "diner session":
        headers = shop.headers(diner="leaving")
        expected = "SESSION_REVOKED"
    else:
        client, key = issue_api_key(tenant=shop.tenant, name="till", kind=ApiClient.Kind.MERCHANT)
        headers = {"Authorization": f"Api-Key {key}"}
        expected = "API_KEY_INVALID"
    cache_everywhere(live_gunicorn_long_ttl, headers)
    # when this process (not the server) revokes it
    if credential == "diner session":
        assert revoke_diner(tenant=shop.tenant, diner_id="leaving") == 1
    else:
        revoke_api_key(client=client)
    revoked_at = time.monotonic()
    # then one second later no worker answers with it any more
    time.sleep(max(0.0, revoked_at + BOUND_S - time.monotonic()))
    after = read_all(live_gunicorn_long_ttl, headers)
    assert {(r.status_code, r.json()["code"]) for r in after} == {(401, expected)}
