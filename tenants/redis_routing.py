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

from collections.abc import Sequence
from functools import cache
from urllib.parse import urlsplit

from django.conf import settings
from django.core.cache import BaseCache, caches
from django_redis import get_redis_connection
from django_redis.pool import ConnectionFactory
from redis.cluster import RedisCluster

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
    return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def all_clients() -> list:
    """Every node's raw client (the engine loads new Lua script versions on each)."""
    return [get_redis_connection(alias) for alias in redis_aliases()]


def script_channel_client():  # -> redis.Redis | RedisCluster | None
    """The node that carries the Lua-script change announcements for every process."""
    return client_for_service("lua-scripts")
