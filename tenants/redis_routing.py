"""Which Redis node serves a tenant (seed ch. 5, DESIGN §5).

Three topologies, chosen by settings (see ``config/settings.py``):

- one node (``REDIS_URL``): every tenant on the cache alias ``default``;
- shards (``REDIS_SHARDS``, a list of standalone nodes): one django-redis cache alias per node
  (``redis-0``, ``redis-1``, …); a tenant maps to one node by **rendezvous hashing** on the
  node's address, so adding a fourth node to three moves about a quarter of the tenants and
  removing one moves only that node's tenants;
- a Redis Cluster (``REDIS_CLUSTER_URL``): one alias whose client is a ``RedisCluster``; the
  ``{t:<tenant>}`` hash tag in every key keeps a tenant's keys in one slot.

Both the Django cache (:func:`cache_for_tenant`) and the raw clients the idempotency engine runs
its Lua scripts on (:func:`client_for_tenant`) go through the same :func:`alias_for_tenant`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.cache import BaseCache, caches
from django_redis import get_redis_connection
from django_redis.pool import ConnectionFactory
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import Encoder, parse_url
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from idempotency.stores.reply_deadline import connection_class_for
from tenants.routing import stable_hash


def node_identity(url: str) -> str:
    """What a node is known by for placement: host, port and database, not its alias, so
    re-ordering the list of nodes moves no tenant."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


def rendezvous_pick(key: str, nodes: Sequence[str]) -> int:
    """Index of the node with the highest hash of (node, key): highest-random-weight hashing."""
    return max(range(len(nodes)), key=lambda i: stable_hash(f"{nodes[i]}|{key}"))


def redis_aliases() -> list[str]:
    """The cache aliases of the Redis nodes, in settings order (empty: no Redis)."""
    return list(getattr(settings, "REDIS_NODE_ALIASES", []))


def _identities(aliases: tuple[str, ...]) -> list[str]:
    return [node_identity(settings.CACHES[alias]["LOCATION"]) for alias in aliases]


def alias_for_tenant(tenant_key: str) -> str | None:
    return _alias_for(f"tenant:{tenant_key}")


def _alias_for(routing_key: str) -> str | None:
    aliases = tuple(redis_aliases())
    if not aliases:
        return None
    if len(aliases) == 1:
        return aliases[0]
    return aliases[rendezvous_pick(routing_key, _identities(aliases))]


def client_for_service(name: str):  # -> redis.Redis | RedisCluster | None
    """The raw client of the node that holds a platform-wide service's keys (e.g. the order-ID
    worker leases), placed by the same hashing as tenants."""
    alias = _alias_for(f"service:{name}")
    return None if alias is None else get_redis_connection(alias)


def client_for_tenant(tenant_key: str):  # -> redis.Redis | RedisCluster | None
    """The raw client (connection-pooled by django-redis) of the tenant's node."""
    alias = alias_for_tenant(tenant_key)
    return None if alias is None else get_redis_connection(alias)


def cache_for_tenant(tenant_key: str) -> BaseCache:
    """The Django cache on the tenant's node (the local-memory cache without Redis)."""
    alias = alias_for_tenant(tenant_key)
    return caches[alias or "default"]


class ClusterConnectionFactory(ConnectionFactory):
    """django-redis connection factory that returns a ``RedisCluster`` client."""

    def connect(self, url: str) -> RedisCluster:
        return _cluster_client(url)


@cache
def _cluster_client(url: str) -> RedisCluster:
    timeout = getattr(settings, "REDIS_SOCKET_TIMEOUT", 1.0)
    return _LazyRedisCluster(
        # Each node's replies read within the timeout in all, as a standalone node's
        # (``idempotency/stores/reply_deadline.py``). redis-py lets a ``rediss://`` URL's own
        # class (a plain TLS connection) win over the one it is given, so the URL goes as
        # ``redis://`` (its options, ``ssl_*`` ones included, kept) and the class brings TLS.
        _tcp_scheme(url),
        connection_class=connection_class_for(url),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        # One retry, at once: enough for a slot that moved or a master that failed over (the
        # slot map is read again first). redis-py's default, three retries with backoff, each
        # after its own 0.25 s pause, made every command to a cluster that lost a master
        # (CLUSTERDOWN) take about 3 s, two of them per order: 6 s per request, not the
        # database-only latency the engine falls back to, until each process's breaker opened.
        # A command that timed out is not retried at all (``_LazyRedisCluster``).
        retry=Retry(NoBackoff(), 1),
    )


def _tcp_scheme(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"redis://{rest}" if scheme == "rediss" else url


class _LazyRedisCluster(RedisCluster):
    """A ``RedisCluster`` that reads the cluster's slot map on first use, not when it is made.

    redis-py asks the startup node (the node of ``REDIS_CLUSTER_URL``) for the slot map in the
    constructor and raises ``RedisClusterException`` when it cannot. The constructor runs where
    a caller looks the client up (``get_redis_connection``), outside the guards every caller
    puts around its commands: a process that made its client while that node was unreachable
    (a gunicorn worker replacing a crashed one during an outage, or after that one master
    failed over) answered 500 to every request that touches Redis, the diner's sign-in
    included. Here the first command makes it, and the next one after a failure tries again;
    a failure is the ``RedisClusterException`` every caller already treats as an outage.

    After a failed attempt the next one waits ``SLOT_MAP_RETRY_SECONDS`` (the breakers' open
    period): until then every caller fails at once. Each attempt against a silent startup node
    waits out the socket timeout holding the client's lock, and every engine call, the
    breaker's node lookup and the process's listeners and heartbeat each made one, so a worker
    started during the outage took about 17 s per order (its "cluster" breaker could not help:
    the lookup that names it is one of those attempts).

    A command that timed out is not sent again. redis-py retries it (the one retry above)
    after reading the slot map anew, but a master that does not answer within the timeout is
    still the slot's master a moment later (a failover takes the cluster's node timeout,
    seconds), so the retry dialled the same silent master and waited a second timeout: every
    engine call to it took twice ``REDIS_SOCKET_TIMEOUT`` until the breaker opened, not the
    one timeout a standalone node costs. A refused connection or ``CLUSTERDOWN`` is still
    retried once, against the slot map just read.
    """

    ERRORS_ALLOW_RETRY = tuple(
        error for error in RedisCluster.ERRORS_ALLOW_RETRY if error is not RedisTimeoutError
    )

    SLOT_MAP_RETRY_SECONDS = 5.0

    def __init__(self, url: str, **kwargs: Any) -> None:  # no super().__init__: deferred
        self.__dict__.update(
            _lazy_url=url,
            _lazy_kwargs=kwargs,
            _lazy_lock=threading.RLock(),
            _lazy_building=False,
            _lazy_built=False,
            _lazy_failed_at=None,  # time.monotonic() of the last failed attempt
            _lazy_failure="",
        )

    def __getattr__(self, name: str) -> Any:
        # Called only for attributes not set yet: the ones RedisCluster.__init__ sets.
        state = self.__dict__
        if name.startswith("_lazy") or state.get("_lazy_built"):
            raise AttributeError(name)
        with state["_lazy_lock"]:
            if state["_lazy_building"]:  # RedisCluster.__init__ probing its own attributes
                raise AttributeError(name)
            if not state["_lazy_built"]:
                failed_at = state["_lazy_failed_at"]
                if (
                    failed_at is not None
                    and time.monotonic() - failed_at < self.SLOT_MAP_RETRY_SECONDS
                ):
                    raise RedisClusterException(
                        f"the cluster's slot map is not read yet: {state['_lazy_failure']}"
                    )
                state["_lazy_building"] = True
                try:
                    RedisCluster.__init__(self, url=state["_lazy_url"], **state["_lazy_kwargs"])
                except Exception as exc:
                    state["_lazy_failed_at"] = time.monotonic()
                    state["_lazy_failure"] = str(exc)
                    raise
                finally:
                    state["_lazy_building"] = False
                state["_lazy_built"] = True
        return object.__getattribute__(self, name)

    def get_connection_kwargs(self) -> dict[str, Any]:
        """The options the nodes' connections get, known without a connection."""
        if self.__dict__.get("_lazy_built"):
            return super().get_connection_kwargs()
        return {**parse_url(self._lazy_url), **self._lazy_kwargs}

    def get_encoder(self) -> Encoder:
        """What ``register_script`` hashes a script with, known without a connection."""
        if self.__dict__.get("_lazy_built"):
            return super().get_encoder()
        options = self.get_connection_kwargs()
        return Encoder(
            options.get("encoding", "utf-8"),
            options.get("encoding_errors", "strict"),
            options.get("decode_responses", False),
        )

    def close(self) -> None:
        if self.__dict__.get("_lazy_built"):
            super().close()


def all_clients() -> list:
    """Every node's raw client (the engine loads new Lua script versions on each)."""
    return [get_redis_connection(alias) for alias in redis_aliases()]


def script_channel_client():  # -> redis.Redis | RedisCluster | None
    """The node that carries the Lua-script change announcements for every process."""
    return client_for_service("lua-scripts")
