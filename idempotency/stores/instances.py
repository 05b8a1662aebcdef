"""Instance registry and stale-claim recovery (seed 2.3): whose lease is it, and is it alive?

An in-progress claim (``claim.lua``) holds its owner's token until it is finished, released or
its lease runs out (``LEASE_MS``, 30 s). A process that dies mid-request blocks its keys for the
rest of the lease. To free them sooner, every process that makes claims:

- has an **instance id**, ``<host>:<pid>:<random>`` (a fresh one after ``fork()``), which
  prefixes every owner token it hands out (``<instance id>/<random>``,
  :func:`idempotency.stores.redis_store.new_owner_token`);
- **heartbeats** it: a daemon thread puts the id into a sorted set scored by Redis's own clock
  (``TIME``, so hosts' clocks do not matter) every ``INSTANCE_HEARTBEAT_SECONDS`` (5 s).
  Registration is lazy: the first owner token a process hands out starts the thread.

An instance whose score is older than ``INSTANCE_DEAD_AFTER_SECONDS`` (15 s) is dead.
:func:`release_claims_of` scans a node's idempotency entries and deletes the in-progress ones
owned by dead instances through ``release.lua``, which compares the owner before it deletes: a
claim that finished or changed hands since the scan is left alone. Why reclaiming early is safe
even if the "dead" process was only frozen and wakes up: the database is the arbiter (the record's
unique constraint and the business tables' own), so at worst its late commit is refused, and its
late ``finish`` fails the owner comparison. Claims whose owner is unknown (tokens without an
instance prefix, processes whose registration never reached Redis) are never touched: they
simply lapse with their lease.

The registry lives on the Redis node ``REDIS_CLIENT_FOR_TENANT`` assigns to the pseudo-tenant
``__instances__`` (no Redis: no registry, and no claims in Redis to recover either). This module
knows nothing of the host application; the application decides when to run recovery and which
nodes to scan (``ordering/instances.py`` does it periodically and at worker start-up).
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from idempotency.core.conf import engine_hook, engine_setting

logger = logging.getLogger(__name__)

REGISTRY_TENANT = "__instances__"
REGISTRY_KEY = "idem:{instances}:heartbeats"
OWNER_SEPARATOR = "/"

# Score = the Redis server's clock, in seconds.
_HEARTBEAT_LUA = """
local now = redis.call('TIME')
redis.call('ZADD', KEYS[1], now[1], ARGV[1])
return now[1]
"""
# The registry and the clock of the node that holds it, read together (on a cluster ``TIME``
# alone would be answered by any node).
_CENSUS_LUA = """
local now = redis.call('TIME')
return {now[1], now[2], redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}
"""
# Forget an instance only if it did not heartbeat since we judged it dead.
_FORGET_LUA = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


def heartbeat_seconds() -> float:
    return float(engine_setting("INSTANCE_HEARTBEAT_SECONDS"))


def dead_after_seconds() -> float:
    return float(engine_setting("INSTANCE_DEAD_AFTER_SECONDS"))


def registry_client() -> Any:
    """The Redis client holding the registry, or None (no Redis configured)."""
    hook = engine_hook("REDIS_CLIENT_FOR_TENANT")
    return hook(REGISTRY_TENANT) if hook else None


class _Instance:
    """This process's identity and heartbeat thread (re-created in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._id = ""
        self._started = False
        self._stop = threading.Event()

    def current_id(self) -> str:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._id = f"{socket.gethostname()}:{self._pid}:{secrets.token_hex(4)}"
                    self._stop = threading.Event()
                    self._started = False
        return self._id

    def ensure_heartbeat(self) -> str:
        instance_id = self.current_id()
        if not self._started:
            with self._lock:
                if not self._started:
                    self._started = True
                    threading.Thread(
                        target=self._run,
                        args=(instance_id, self._stop),
                        name="idempotency-instance-heartbeat",
                        daemon=True,
                    ).start()
        return instance_id

    def stop(self) -> None:
        """Stop heartbeating and leave the registry (a clean exit is not a death)."""
        if self._pid != os.getpid() or not self._started:
            return
        self._stop.set()
        try:
            client = registry_client()
            if client is not None:
                client.zrem(REGISTRY_KEY, self._id)
        except Exception:  # shutting down: the entry just looks dead later, which is harmless
            logger.debug("could not deregister instance %s", self._id, exc_info=True)

    def _run(self, instance_id: str, stop: threading.Event) -> None:
        while True:
            try:
                beat(instance_id)
            except Exception as exc:  # the thread must outlive any failure
                logger.warning("instance heartbeat of %s failed, will retry: %s", instance_id, exc)
            if stop.wait(heartbeat_seconds()):
                return


_instance = _Instance()
atexit.register(_instance.stop)


def instance_id() -> str:
    """This process's instance id (``host:pid:random``), without starting a heartbeat."""
    return _instance.current_id()


def registry_enabled() -> bool:
    return bool(engine_setting("INSTANCE_REGISTRY"))


def owner_prefix() -> str:
    """Prefix of every owner token this process hands out; starts its heartbeat (once).

    Empty when the registry is switched off (``INSTANCE_REGISTRY``): claims then carry no
    instance id and are never reclaimed early, only by their lease running out."""
    if not registry_enabled():
        return ""
    return _instance.ensure_heartbeat() + OWNER_SEPARATOR


def instance_of_owner(owner: str) -> str | None:
    """The instance id inside an owner token, or None for tokens without one."""
    head, sep, _ = owner.rpartition(OWNER_SEPARATOR)
    return head if sep and head else None


def beat(instance: str) -> None:
    """Record one heartbeat of ``instance`` (the thread does this; tests may too)."""
    client = registry_client()
    if client is not None:
        client.eval(_HEARTBEAT_LUA, 1, REGISTRY_KEY, instance)


@dataclass(frozen=True)
class Census:
    """The registry at one instant of the Redis clock."""

    now: float
    last_seen: dict[str, float]

    def silent_for(self, instance: str) -> float:
        return self.now - self.last_seen[instance]

    def dead(self, *, after: float) -> set[str]:
        return {i for i, seen in self.last_seen.items() if self.now - seen >= after}

    def alive(self, *, after: float) -> set[str]:
        return set(self.last_seen) - self.dead(after=after)


def census(client: Any | None = None) -> Census | None:
    """Every registered instance with its last heartbeat; None without a registry."""
    client = client if client is not None else registry_client()
    if client is None:
        return None
    seconds, micros, flat = client.eval(_CENSUS_LUA, 1, REGISTRY_KEY)
    return Census(
        now=int(seconds) + int(micros) / 1e6,
        last_seen={_text(flat[i]): float(flat[i + 1]) for i in range(0, len(flat), 2)},
    )


def forget(instances: Iterable[str], *, seen_before: float, client: Any | None = None) -> int:
    """Drop dead instances from the registry, unless they heartbeated after ``seen_before``."""
    client = client if client is not None else registry_client()
    if client is None:
        return 0
    return sum(
        int(client.eval(_FORGET_LUA, 1, REGISTRY_KEY, instance, int(seen_before)))
        for instance in instances
    )


def release_claims_of(dead: set[str], *, clients: Iterable[Any], batch: int = 500) -> int:
    """Delete in-progress claims owned by ``dead`` instances on every node in ``clients``;
    returns how many were released. Each delete compares the owner first (``release.lua``)."""
    from idempotency.stores.redis_store import RedisIdempotencyStore

    if not dead:
        return 0
    released = 0
    for client in clients:
        store = RedisIdempotencyStore(client)
        keys: list[Any] = []
        for key in client.scan_iter(match="idem:*", count=1000, _type="hash"):
            keys.append(key)
            if len(keys) >= batch:
                released += _release_batch(client, store, keys, dead)
                keys = []
        if keys:
            released += _release_batch(client, store, keys, dead)
    return released


def _release_batch(client: Any, store: Any, keys: list[Any], dead: set[str]) -> int:
    try:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, "st", "own")
        states = pipe.execute()
    except (RedisError, RedisClusterException):  # as idempotency.stores.nodes.REDIS_UNAVAILABLE
        logger.warning("could not read claims for stale-lease recovery", exc_info=True)
        return 0
    released = 0
    for key, (state, owner) in zip(keys, states, strict=True):
        if state != b"p" or owner is None:
            continue
        owner_text = _text(owner)
        if instance_of_owner(owner_text) in dead and store.release(
            key=_text(key), owner=owner_text
        ):
            released += 1
            logger.info("released claim %s of dead instance %s", _text(key), owner_text)
    return released


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
