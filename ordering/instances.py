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

Where it looks, on every topology: claims on every Redis node (each of ``REDIS_SHARDS``; on a
cluster every master, through the cluster client), worker ids on the node the routing assigns
them (``client_for_service("order-id-workers")``, the one the leasing processes use; on a cluster
each key on the master its slot belongs to) and in the database.

It runs when a Celery worker starts (``config/celery.py``), every ``STALE_LEASE_SWEEP_SECONDS``
from Celery beat (``ordering.reclaim_stale_leases``), and on demand with
``manage.py reclaim_stale_leases`` (e.g. from cron where no beat runs).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django_redis import get_redis_connection

from idempotency.stores import instances
from idempotency.stores.nodes import node_name
from ordering.worker_ids import (
    WORKER_IDS,
    DatabaseLeaseStore,
    LeaseStore,
    LeaseStoreUnavailable,
    RedisLeaseStore,
)
from tenants.redis_routing import redis_aliases

logger = logging.getLogger(__name__)


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
    """Free the worker ids of dead processes in every store that may hold them: the Redis node
    (or cluster) the routing assigns the leases to, and the database."""
    if not dead_host_pids:
        return 0
    lease_seconds = settings.ORDER_ID_LEASE_SECONDS
    released = 0
    for store in _lease_stores():
        try:
            for worker_id, owner in store.holders().items():
                if _host_pid(owner) in dead_host_pids and store.release_abandoned(
                    worker_id=worker_id,
                    owner=owner,
                    idle_seconds=lease_seconds * 2 / 3,
                    lease_seconds=lease_seconds,
                ):
                    released += 1
                    logger.info("released order-ID worker id %d of dead %s", worker_id, owner)
        except LeaseStoreUnavailable as exc:
            logger.warning("stale-lease recovery: %s lease store skipped (%s)", store.name, exc)
    return released


def _lease_stores() -> list[LeaseStore]:
    """Every place a worker id may be leased, over all 128 ids (a process started with
    ``ORDER_ID_LEASE_STORE=database`` leases any id from the database)."""
    stores: list[LeaseStore] = [DatabaseLeaseStore(ids=range(WORKER_IDS))]
    if redis_aliases():
        stores.insert(0, RedisLeaseStore(ids=range(WORKER_IDS)))
    return stores
