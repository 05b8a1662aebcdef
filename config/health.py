"""``/healthz`` and ``/readyz``: what a load balancer or an orchestrator asks a server.

Answered before any other middleware, so a probe by the server's own address (not a name in
``ALLOWED_HOSTS``) over plain HTTP (no redirect to HTTPS) gets its answer, and nothing else is
reachable that way. Neither says anything about a tenant.

- ``/healthz``: the process answers (200 ``{"status": "ok"}``); nothing else is touched.
- ``/readyz``: it can serve orders: PostgreSQL answers ``SELECT 1`` within
  ``READINESS_TIMEOUT_SECONDS`` (else 503; a balancer gives up after a few seconds). Each Redis
  node is reported (``ok`` when it takes a write, else ``unavailable``) but does not decide:
  without Redis the engine runs database-only, still exactly once (DESIGN §3 layer 5). A node
  this process's breaker has taken out of use is ``unavailable`` without a ping, and the
  others are asked at once, while the database is, within the same limit: a hanging node
  held the probe for its socket timeout, one node after another.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from idempotency.stores.nodes import breaker_open, node_name
from tenants.redis_routing import all_clients

PATHS = ("/healthz", "/readyz")


class HealthMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info not in PATHS or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        if request.path_info == "/healthz":
            return _answer(request, 200, {"status": "ok"})
        limit = settings.READINESS_TIMEOUT_SECONDS
        deadline = time.monotonic() + limit
        # every node asked at once, while the database is: a silent node held the probe for
        # its socket timeout, node after node, past a balancer's timeout
        pings = _PINGS.submit_all(all_clients())
        database = _database_answers()
        body = {
            "status": "ok" if database else "unavailable",
            "database": "ok" if database else "unavailable",
            "redis": _PINGS.states(pings, deadline),
        }
        return _answer(request, 200 if database else 503, body)


def _database_answers() -> bool:
    if connection.vendor != "postgresql":  # the SQLite demo: a file, nothing to wait for
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except DatabaseError:
            return False
    try:
        asyncio.run(_postgresql_answers(settings.READINESS_TIMEOUT_SECONDS))
        return True
    except (psycopg.Error, OSError, TimeoutError):
        return False


# what Django passes psycopg beyond libpq's own parameters (adapters, cursor class)
_NOT_LIBPQ = ("context", "cursor_factory", "prepare_threshold")


async def _postgresql_answers(limit: float) -> None:
    """``SELECT 1`` on a connection of its own, connecting included, within ``limit`` seconds.

    Not the worker's persistent connection: a blocking call on it has no time limit (libpq
    waits on a server that accepted and says nothing, and on one that stalls mid-query), so a
    silent database held the probe until gunicorn's ``timeout`` killed the worker, a 500.
    Awaited, the connection is dropped when the limit passes."""
    params = {
        key: value
        for key, value in connection.get_connection_params().items()
        if key not in _NOT_LIBPQ
    }

    async def select_one() -> None:
        async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as probe:
            await probe.execute("SELECT 1")

    await asyncio.wait_for(select_one(), timeout=limit)


# Written (and expiring at once) by each probe of a standalone node: whether it takes writes.
WRITE_PROBE_KEY = "readyz:takes-writes"


def _redis_state(client: object) -> str:
    """``ok`` when the node takes a write. A ``PING`` alone called ``ok`` a node that answers
    and refuses every claim: a replica (a failover demoted it, or ``REDIS_URL`` names one:
    ``READONLY``) or a node full at its ``maxmemory`` under ``noeviction`` (``OOM``), whose
    tenants the engine runs database-only (docs/scaling.md). A Redis Cluster is still pinged:
    one key's write would speak for the master of its slot only."""
    try:
        if isinstance(client, RedisCluster):
            client.ping()
        else:
            client.set(WRITE_PROBE_KEY, b"1", px=1000)  # type: ignore[attr-defined]
        return "ok"
    except (RedisError, RedisClusterException, OSError):  # a cluster with no node reachable
        return "unavailable"


class _Pings:
    """The Redis pings of readiness probes, each in a thread of a small shared pool, so the
    nodes are asked at once and the probe waits for them until its deadline only. A ping past
    the deadline is reported ``unavailable`` and ends on its own, within the node's socket
    timeout; a node this process's breaker has taken out of use is not pinged at all."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def submit_all(self, clients: list[object]) -> list[Future[str] | None]:
        if self._pool is None:  # made in the worker, after gunicorn's fork
            self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="readyz-ping")
        return [
            None if breaker_open(node_name(client)) else self._pool.submit(_redis_state, client)
            for client in clients
        ]

    def states(self, pings: list[Future[str] | None], deadline: float) -> list[str]:
        pending = [ping for ping in pings if ping is not None]
        wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        return [
            ping.result() if ping is not None and ping.done() else "unavailable" for ping in pings
        ]


_PINGS = _Pings()


def _answer(request: HttpRequest, status: int, body: dict[str, object]) -> HttpResponse:
    """The JSON body, left out for HEAD (the status is the answer; a server must not send a
    body with it)."""
    content = b"" if request.method == "HEAD" else json.dumps(body)
    response = HttpResponse(content, status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response
