"""Stale-lease recovery for this application's processes (seed 2.3, issue item 5).

Two kinds of lease outlive a process that dies without cleaning up:

- idempotency in-progress claims (Redis hashes whose ``own`` field is the owner token), which
  block their key until the lease (30 s) runs out;
- order-ID worker ids (``orderid:worker:<n>`` in Redis, or ``WorkerLease`` rows), which keep
  one of 128 ids out of use until the lease (``ORDER_ID_LEASE_SECONDS``) runs out.

:func:`reclaim_stale_leases` asks the instance registry (:mod:`idempotency.stores.instances`: every
process heartbeats ``host:pid:random``) which instances went silent, and frees their leases,
each with a compare-owner-then-delete so nothing that changed hands meanwhile is touched:

- claims of instances silent for ``INSTANCE_DEAD_AFTER_SECONDS`` (15 s) — safe however wrong the
  verdict, because the database arbitrates any late commit of a "dead" process;
- order-ID worker ids, matched by the ``host:pid`` both tokens start with, only when the owner
  has been silent longer than it could still be issuing IDs (heartbeat interval + 2/3 of the
  lease: a handle stops issuing 2/3 of a lease after its last renewal), no live instance has
  the same ``host:pid`` (a reused pid), and the lease itself was not renewed for 2/3 of its
  length (checked atomically with the owner). Order IDs are uniqueness-critical; these rules make
  an early reclaim impossible to tell apart from the lease having lapsed on its own.

It runs when a Celery worker starts (``config/celery.py``), every ``STALE_LEASE_SWEEP_SECONDS``
from Celery beat (``ordering.reclaim_stale_leases``), and on demand with
``manage.py reclaim_stale_leases`` (e.g. from cron where no beat runs).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.db.models.functions import Now
from django_redis import get_redis_connection

from idempotency.stores import instances
from idempotency.stores.nodes import node_name
from ordering.models import WorkerLease
from ordering.worker_ids import KEY_PREFIX, WORKER_IDS
from tenants.redis_routing import redis_aliases

logger = logging.getLogger(__name__)

# Delete the worker-id lease if it still names the dead owner and was not renewed lately.
_RELEASE_ABANDONED_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PTTL', KEYS[1]) <= tonumber(ARGV[2]) then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class ReclaimReport:
    dead_instances: int = 0
    claims_released: int = 0
    worker_leases_released: int = 0
    instances_forgotten: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def reclaim_stale_leases() -> ReclaimReport:
    """Free the leases of every instance that stopped heartbeating; safe to run anywhere, any
    number of times, concurrently."""
    registry = instances.registry_client()
    census = instances.census(registry) if registry is not None else None
    if census is None:
        return ReclaimReport()
    dead_after = instances.dead_after_seconds()
    dead = census.dead(after=dead_after)
    if not dead:
        return ReclaimReport()
    claims = instances.release_claims_of(dead, clients=_claim_nodes())
    lease_seconds = settings.ORDER_ID_LEASE_SECONDS
    lease_after = max(dead_after, instances.heartbeat_seconds() + lease_seconds * 2 / 3 + 1)
    lease_dead = census.dead(after=lease_after)
    alive = {_host_pid(i) for i in census.alive(after=dead_after)}
    leases = _release_worker_leases({_host_pid(i) for i in lease_dead} - alive)
    forgotten = instances.forget(lease_dead, seen_before=census.now - lease_after, client=registry)
    report = ReclaimReport(
        dead_instances=len(dead),
        claims_released=claims,
        worker_leases_released=leases,
        instances_forgotten=forgotten,
    )
    if claims or leases:
        logger.warning("stale-lease recovery: %s", report.as_dict())
    return report


def _host_pid(token: str) -> str:
    """``host:pid`` of an instance id or an order-ID owner token (both ``host:pid:random``)."""
    return token.rsplit(":", 1)[0]


def _claim_nodes() -> list[Any]:
    """One client per Redis node that holds idempotency claims."""
    nodes: dict[str, Any] = {}
    for alias in redis_aliases():
        client = get_redis_connection(alias)
        nodes.setdefault(node_name(client), client)
    return list(nodes.values())


def _release_worker_leases(dead_host_pids: set[str]) -> int:
    if not dead_host_pids:
        return 0
    abandoned_for = settings.ORDER_ID_LEASE_SECONDS * 2 / 3
    released = 0
    if settings.REDIS_URL:
        released += _release_redis_leases(dead_host_pids, abandoned_for=abandoned_for)
    for lease in WorkerLease.objects.all():
        if _host_pid(lease.owner) in dead_host_pids:
            released += WorkerLease.objects.filter(
                worker_id=lease.worker_id,
                owner=lease.owner,
                heartbeat_at__lt=Now() - timedelta(seconds=abandoned_for),
            ).delete()[0]
    return released


def _release_redis_leases(dead_host_pids: set[str], *, abandoned_for: float) -> int:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        keys = [f"{KEY_PREFIX}{worker_id}" for worker_id in range(WORKER_IDS)]
        # Remaining TTL of a lease not renewed for `abandoned_for` seconds.
        ttl_ms = int((settings.ORDER_ID_LEASE_SECONDS - abandoned_for) * 1000)
        released = 0
        for key, owner in zip(keys, client.mget(keys), strict=True):
            if owner is None or _host_pid(owner.decode()) not in dead_host_pids:
                continue
            if client.eval(_RELEASE_ABANDONED_LUA, 1, key, owner, ttl_ms):
                released += 1
                logger.info("released order-ID worker lease %s of dead %s", key, owner.decode())
        return released
    finally:
        client.close()
