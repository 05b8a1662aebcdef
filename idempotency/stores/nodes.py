"""Process-wide engine state: the local result cache, its invalidation listeners, and one
guarded :class:`RedisIdempotencyStore` (store + circuit breaker) per Redis node.

A node is a standalone server, or one master of a Redis Cluster: on a cluster each master that
serves a tenant's slot (its ``{t:<tenant>}`` hash tag, or a hot tenant's sub-bucket) gets a
breaker of its own, named ``cluster:<host>:<port>`` like the usage census names it, so a slow or
dead master sends only the tenants whose slots it serves to database-only. The masters of one
cluster share its client, store and invalidation listener (one per client)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from redis.cluster import PRIMARY
from redis.exceptions import (
    ClusterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from idempotency import metrics
from idempotency.core.conf import channel_name, engine_hook, engine_setting
from idempotency.core.keys import tenant_hash_tag
from idempotency.stores.breaker import BreakerState, CircuitBreaker
from idempotency.stores.local_cache import InvalidationListener, LocalResultCache
from idempotency.stores.redis_store import RedisIdempotencyStore, is_cluster

T = TypeVar("T")

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_nodes: dict[str, GuardedStore] = {}  # by node: a standalone server or a cluster master
_stores: dict[str, RedisIdempotencyStore] = {}  # by client: a standalone server or a cluster
_listeners: dict[str, InvalidationListener] = {}  # by client


@cache
def local_cache() -> LocalResultCache:
    return LocalResultCache(
        max_entries=engine_setting("LOCAL_CACHE_ENTRIES"),
        max_bytes=engine_setting("LOCAL_CACHE_BYTES"),
        ttl_s=engine_setting("LOCAL_CACHE_TTL_SECONDS"),
    )


# What a call to a node raises when the node cannot answer. redis-py reports a cluster none of
# whose nodes it can reach with RedisClusterException, which is not a RedisError: code that
# talks to a raw client catches both; calls through GuardedStore.run see a RedisError only.
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (RedisError, RedisClusterException)


# What a node says when it cannot serve a call now, not that the call is wrong: unreachable or
# silent (ConnectionError, TimeoutError, with AUTH refused and LOADING among them), a replica
# (READONLY), full (OOM), a cluster that lost a master (CLUSTERDOWN, MASTERDOWN, TRYAGAIN), an
# ACL that refuses us (NOPERM), and the refusals redis-py has no class for: a script running
# too long in another client (BUSY), a failed background save that stops writes (MISCONF), too
# few replicas (NOREPLICAS).
_NODE_STATES = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    OutOfMemoryError,
    ClusterDownError,
    TryAgainError,
    NoPermissionError,
    RedisClusterException,  # no node of a cluster reachable
)
_NODE_STATE_REPLIES = ("BUSY ", "MISCONF ", "NOREPLICAS ")


def node_cannot_serve(exc: BaseException) -> bool:
    """Whether ``exc`` is a node's state (gone, slow, read-only, full, busy...) rather than a
    fault of the call (a script error, a wrong type): the former is logged in one line naming
    it, for every request meets it while it lasts (a traceback each flooded the log), the
    latter with its traceback."""
    if isinstance(exc, _NODE_STATES):
        return True
    return isinstance(exc, RedisError) and str(exc).startswith(_NODE_STATE_REPLIES)


class GuardedStore:
    """A node's store whose every call is timed and reported to the node's breaker."""

    def __init__(self, name: str, store: RedisIdempotencyStore, breaker: CircuitBreaker) -> None:
        self.name = name
        self.store = store
        self.breaker = breaker

    def claim(self, **kwargs: Any) -> Any:
        return self.run("claim", lambda: self.store.claim(**kwargs))

    def finish(self, **kwargs: Any) -> bool:
        return self.run("finish", lambda: self.store.finish(**kwargs))

    def release(self, **kwargs: Any) -> bool:
        return self.run("release", lambda: self.store.release(**kwargs))

    def purge(self, **kwargs: Any) -> None:
        return self.run("purge", lambda: self.store.purge(**kwargs))

    def run(self, op: str, call: Callable[[], T]) -> T:
        """Run one call to this node, timed and reported to its breaker and latency metric."""
        started = time.perf_counter()
        try:
            result = call()
        except RedisError:
            self._report(op, started, ok=False)
            raise
        except RedisClusterException as exc:  # no node of the cluster reachable: an outage
            self._report(op, started, ok=False)
            raise RedisConnectionError(f"{self.name}: {exc}") from exc
        self._report(op, started, ok=True)
        return result

    def _report(self, op: str, started: float, *, ok: bool) -> None:
        seconds = time.perf_counter() - started
        self.breaker.record(seconds=seconds, ok=ok)
        metrics.redis_latency.labels(node=self.name, op=op).observe(seconds)


def node_name(client: Any) -> str:
    """The client's name: a standalone server's ``host:port/db``, or ``cluster``."""
    if is_cluster(client):
        return "cluster"
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host', 'unix')}:{kwargs.get('port', '')}/{kwargs.get('db', 0)}"


def serving_node_name(client: Any, slot_key: str, *, client_name: str | None = None) -> str:
    """The node that serves ``slot_key``: the client's own server, or on a cluster the master of
    the key's slot (``cluster:<host>:<port>``, from the client's slot map, no round trip).
    ``client_name``: the client's :func:`node_name`, when the caller has it already."""
    if not is_cluster(client):
        return client_name or node_name(client)
    try:
        master = client.nodes_manager.get_node_from_slot(client.keyslot(slot_key))
    except RedisClusterException:  # the slot map is not known yet: one breaker for the unknown
        return "cluster"
    return f"cluster:{master.name}"


def node_for(tenant_key: str, *, key: str | None = None) -> GuardedStore | None:
    """The guarded store of the node serving the tenant (on a cluster: ``key``'s slot, by
    default the tenant's hash tag), whatever its breaker says (None: no Redis configured)."""
    hook = engine_hook("REDIS_CLIENT_FOR_TENANT")
    client = hook(tenant_key) if hook else None
    if client is None:
        return None
    client_name = node_name(client)
    name = serving_node_name(client, key or tenant_hash_tag(tenant_key), client_name=client_name)
    if name != client_name:  # a cluster master, so the client has read the slot map
        _forget_demoted_masters(client)
    node = _nodes.get(name)
    if node is None:
        with _lock:
            node = _nodes.get(name)
            if node is None:
                node = _nodes[name] = _new_node(name, client)
    _listeners[client_name].ensure_running()
    return node


def _forget_demoted_masters(client: Any) -> None:
    """Drop the breakers of this cluster's nodes that are no longer masters in its slot map.

    Why: a master that fails over while its breaker is open (paused past the node timeout)
    serves no slot afterwards, so no request ever probes that breaker again; it stayed open in
    ``idempotency_breaker_state`` and on the admin page for the life of the process, and
    ``RedisBreakerOpen`` paged for a node no tenant used. A master that only looks dead (not
    failed over yet) is still the master of its slots and keeps its breaker. Its gauge is set
    to closed: it holds no tenant in database-only. Should it become a master again, its next
    request makes it a new breaker. No round trip: the slot map is the client's own."""
    masters = {
        f"cluster:{node.name}"
        for node in client.nodes_manager.nodes_cache.values()
        if node.server_type == PRIMARY
    }
    demoted = [
        name
        for name, node in list(_nodes.items())
        if node.store.client is client and name not in masters
    ]
    for name in demoted:
        with _lock:
            forgotten = _nodes.pop(name, None)
        if forgotten is not None:
            metrics.breaker_changed(name, BreakerState.CLOSED.value)
            logger.info("redis breaker %s: forgotten, no longer a master of the cluster", name)


def cache_beside(node: GuardedStore | None) -> LocalResultCache | None:
    """This process's result cache, for a key a Redis node serves (``node``, from
    :func:`node_for`): the node's channel tells every process when a result is erased or
    purged, and each drops its copy. None without Redis (database-only): nothing would tell
    this process that another one erased a result, and it would replay the erased reply until
    the entry's TTL ran out."""
    return local_cache() if node is not None else None


def shared_cache_for(tenant_key: str, *, key: str | None = None) -> LocalResultCache | None:
    """:func:`cache_beside` the node serving the tenant (``key``'s slot on a cluster)."""
    return cache_beside(node_for(tenant_key, key=key))


def usable(node: GuardedStore | None) -> GuardedStore | None:
    """``node`` if it may be used now; None means database-only (no Redis configured, or the
    node's breaker is open)."""
    return node if node is not None and node.breaker.allow() else None


def redis_store_for(tenant_key: str, *, key: str | None = None) -> GuardedStore | None:
    """The tenant's store if its node may be used now (:func:`usable`)."""
    return usable(node_for(tenant_key, key=key))


def _new_node(name: str, client: Any) -> GuardedStore:
    client_name = node_name(client)
    store = _stores.get(client_name)
    if store is None:
        store = _stores[client_name] = RedisIdempotencyStore(
            client, channel=channel_name("invalidate")
        )
        listener = InvalidationListener(client, local_cache(), channel=store.channel)
        _listeners[client_name] = listener
        listener.start()
    breaker = CircuitBreaker(name, on_change=metrics.breaker_changed, **engine_setting("BREAKER"))
    metrics.breaker_changed(name, breaker.state)
    return GuardedStore(name, store, breaker)


def breaker_open(name: str) -> bool:
    """Has this process's breaker of node ``name`` (:func:`node_name`, or a cluster master's
    ``cluster:<host>:<port>``) taken it out of use? Reads that only report on a node (a
    scrape, a readiness probe) skip it then: a node that hangs held each for its socket
    timeout, node after node, past a scraper's own timeout."""
    node = _nodes.get(name)
    return node is not None and node.breaker.observed_state() is BreakerState.OPEN


def breaker_states() -> dict[str, str]:
    """Every known node's breaker state, for the dashboard and logs."""
    return {name: node.breaker.observed_state().value for name, node in _nodes.items()}


def reset() -> None:
    """Forget nodes, breakers and cached results (tests, and after settings change)."""
    with _lock:
        for listener in _listeners.values():
            listener.stop()
        _nodes.clear()
        _stores.clear()
        _listeners.clear()
    local_cache().clear()


def run_on_node(
    tenant_key: str, call: Callable[[Any], T], *, op: str = "other", may_probe: bool = False
) -> T | None:
    """Run ``call(client)`` on the tenant's Redis node, for the engine's calls outside the
    claim path (rate limits, token issuing and checking).

    None when the node cannot be used now: no Redis configured, or its breaker is not closed
    (the caller decides what that means: the rate limiter lets the request through, token
    issuing answers 503). The call is timed and reported to the node's breaker and latency
    metric like a claim; a ``RedisError`` is reported, then re-raised.

    ``may_probe``: the call may be a half-open breaker's probe, as claims are. Token calls
    may: they have no answer without Redis, so an app that waits for tokens before it writes
    would otherwise wait, after Redis is back, for other traffic's claims to close the breaker
    (a call that is no probe never closes it). The rate limiter's may not: every request makes
    one, and it lets the request through anyway."""
    node = node_for(tenant_key)
    if node is None:
        return None
    if may_probe:
        if not node.breaker.allow():
            return None
    elif node.breaker.observed_state() is not BreakerState.CLOSED:
        return None
    return node.run(op, lambda: call(node.store.client))
