"""Leases on the 128 worker ids that keep order IDs from different processes apart.

Every process that issues order IDs (:mod:`ordering.order_ids`) puts a worker id (0..127) into
each one, and no two live processes may use the same id. A process leases one for
``ORDER_ID_LEASE_SECONDS`` (L) and a daemon thread renews it every L/3.

Where leases live:

- Redis, when Redis is configured (on the node the routing assigns, :func:`_redis_client`):
  key ``orderid:worker:{n}`` holds the owner token, claimed with ``SET NX EX``; renewal and
  release are Lua scripts that first compare the owner.
- The ``WorkerLease`` table otherwise, or when Redis is unreachable or its ids are all held at
  lease time: claimed with a conditional ``UPDATE ... WHERE expires_at < now()`` or an
  ``INSERT`` that the primary key refuses to a second claimer, so the database, not a prior
  read, decides every race.

The two stores do not know about each other, so with both they lease disjoint ids (Redis 0..63,
the database 64..127, :func:`default_stores`): a process that fell back to the database can never
be handed an id that another process holds in Redis.

Timing: a handle vouches for its id until 2L/3 after the last successful claim or renewal,
measured on the monotonic clock from before the request went out, so it can only err early. One
missed heartbeat is harmless; a process that cannot renew stops issuing IDs at least L/3 before
its store lets anyone else take the id. That gap also covers a successor whose wall clock is up to
L/3 behind ours and which would otherwise reuse ticks we already used.

Renewal extends the lease if we still hold it, and takes it back if it lapsed and nobody took it
(the gap above makes that safe); only when another owner holds it is the handle marked lost, after
which the generator refuses to issue IDs. Without taking back a lapsed lease, any store outage
longer than L would leave the process unable to issue IDs until restarted.

The gap assumes a lease ends only by lapsing. A Redis node that loses its data (restarted
without persistence, flushed, failed over to a replica that had not seen the lease) frees the
id at once, and another process can lease it while this one still vouches for it, until its
next renewal (at most L/3) finds the other owner. Meanwhile both can issue the same IDs: the
second ``INSERT`` of an id fails on the order's primary key, so no order is written over
another; that request is answered 503 ``ORDER_ID_UNAVAILABLE`` (``Retry-After: 1``), its
transaction (its idempotency record with it) rolled back, and its process renews its lease at
once (:func:`ordering.order_ids.recheck_process_lease`), which finds the other owner and gives
the id up, so the retry is numbered under an id of its own.

Fork safety: a forked child (gunicorn, Celery prefork) inherits the parent's handle but not its
heartbeat thread, and must not use the parent's id. Every accessor compares the process id and,
in a child, leases a fresh id first; the parent's lease is left alone.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Protocol, TypeVar
from uuid import uuid4

import redis
from django.conf import settings
from django.db import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.models import Q
from django.db.models.functions import Now

from ordering.models.worker_lease import WorkerLease
from tenants.redis_routing import client_for_service, redis_aliases

__all__ = [
    "KEY_PREFIX",
    "WORKER_IDS",
    "DatabaseLeaseStore",
    "ForkSafeLock",
    "LeaseStore",
    "LeaseStoreUnavailable",
    "NoWorkerIdAvailable",
    "RedisLeaseStore",
    "WorkerLeaseHandle",
    "WorkerLeaseLost",
    "default_stores",
    "free_worker_ids",
    "lease_worker_id",
]

logger = logging.getLogger(__name__)

WORKER_IDS = 128
"""How many worker ids exist: the 7 worker bits of an order ID."""

KEY_PREFIX = "orderid:worker:"

# An unreachable Redis must send us to the database fallback quickly, not after the OS's TCP
# timeout of minutes, which the first order of a process would sit through.

# Extend the lease if KEYS[1] still holds our token; take it back if it lapsed (absent key);
# 0 when another owner holds it.
_RENEW_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
    return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
if not holder then
    redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
    return 1
end
return 0
"""

# Delete KEYS[1] only while it holds our token: a lease already taken over is not ours to free.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

# Delete KEYS[1] if it still names the (dead) owner ARGV[1] and was not renewed lately: at most
# ARGV[2] ms of the lease are left.
_RELEASE_ABANDONED_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('PTTL', KEYS[1]) <= tonumber(ARGV[2]) then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

T = TypeVar("T")


class NoWorkerIdAvailable(RuntimeError):
    """All 128 worker ids are leased: more processes issue order IDs than the ID layout allows."""


class WorkerLeaseLost(RuntimeError):
    """The worker id is no longer this process's to use (taken over, lapsed or released)."""


class LeaseStoreUnavailable(RuntimeError):
    """The lease store (Redis or the database) could not be reached."""


_fork_safe_locks: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


class ForkSafeLock:
    """A mutex that a forked child gets back unlocked.

    A plain lock held by another thread at fork time stays locked forever in the child, where
    that thread does not exist. gunicorn and Celery fork long after import, so the locks guarding
    the lease and the ID sequence are replaced with fresh ones in every child.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _fork_safe_locks.add(self)

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def _unlock_all_in_child() -> None:
    for lock in list(_fork_safe_locks):
        lock._lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_all_in_child)


class LeaseStore(Protocol):
    """Where leases live. Every method raises :class:`LeaseStoreUnavailable` when unreachable."""

    name: str

    def claim(self, *, candidates: Sequence[int], owner: str, lease_seconds: int) -> int | None:
        """Take the first free id of ``candidates`` for ``owner``; None when all are held."""
        ...

    def renew(self, *, worker_id: int, owner: str, lease_seconds: int) -> bool:
        """Extend (or take back, if lapsed and free) the lease; False if another owner holds it."""
        ...

    def release(self, *, worker_id: int, owner: str) -> None:
        """Free the id if ``owner`` still holds it."""
        ...

    def holders(self) -> dict[int, str]:
        """The owner of every id of this store's range that is leased now."""
        ...

    def release_abandoned(
        self, *, worker_id: int, owner: str, idle_seconds: float, lease_seconds: int
    ) -> bool:
        """Free the id if ``owner`` still holds it and has not renewed it for ``idle_seconds``
        (stale-lease recovery, :mod:`ordering.instances`); whether it was freed."""
        ...


def _redis_client() -> redis.Redis:
    """The Redis node holding worker-id leases, picked by the same routing as tenants' keys
    (``tenants.redis_routing``), so shards and clusters need no extra node."""
    return client_for_service("order-id-workers")


@contextmanager
def _redis_reachable() -> Iterator[None]:
    """Any Redis error makes the store unavailable, so the lease goes to the database's half.

    Not only a node that cannot be reached: one that answers but refuses writes too (READONLY
    from a node demoted to a replica by a failover, OOM from a full node that evicts nothing,
    MISCONF, CLUSTERDOWN from a cluster that lost a master), as the idempotency engine treats
    every Redis error. Such an error escaping here was a 500 for each order the process was
    sent, for as long as the node refused."""
    try:
        yield
    except (
        redis.exceptions.RedisError,
        redis.exceptions.RedisClusterException,  # no node of a cluster reachable
    ) as exc:
        raise LeaseStoreUnavailable(f"Redis unreachable: {exc}") from exc


class RedisLeaseStore:
    """Leases as Redis keys ``{key_prefix}{n}`` holding the owner token, expiring on their own."""

    name = "redis"

    def __init__(self, *, key_prefix: str = KEY_PREFIX, ids: range = range(WORKER_IDS)) -> None:
        self.ids = ids
        self._client = _redis_client()
        self._key_prefix = key_prefix
        self._renew = self._client.register_script(_RENEW_LUA)
        self._release = self._client.register_script(_RELEASE_LUA)
        self._release_abandoned = self._client.register_script(_RELEASE_ABANDONED_LUA)

    def key(self, worker_id: int) -> str:
        """The Redis key of ``worker_id``'s lease."""
        return f"{self._key_prefix}{worker_id}"

    def claim(self, *, candidates: Sequence[int], owner: str, lease_seconds: int) -> int | None:
        with _redis_reachable():
            for worker_id in candidates:
                if self._client.set(self.key(worker_id), owner, nx=True, ex=lease_seconds):
                    return worker_id
        return None

    def renew(self, *, worker_id: int, owner: str, lease_seconds: int) -> bool:
        with _redis_reachable():
            return bool(self._renew(keys=[self.key(worker_id)], args=[owner, lease_seconds]))

    def release(self, *, worker_id: int, owner: str) -> None:
        with _redis_reachable():
            self._release(keys=[self.key(worker_id)], args=[owner])

    def holders(self) -> dict[int, str]:
        """One pipelined read of every key; on a Redis Cluster the keys (no hash tag) live on
        several masters and the pipeline asks each master for its own."""
        with _redis_reachable():
            pipe = self._client.pipeline(transaction=False)
            for worker_id in self.ids:
                pipe.get(self.key(worker_id))
            owners = pipe.execute()
        return {
            worker_id: owner.decode() if isinstance(owner, bytes) else owner
            for worker_id, owner in zip(self.ids, owners, strict=True)
            if owner is not None
        }

    def release_abandoned(
        self, *, worker_id: int, owner: str, idle_seconds: float, lease_seconds: int
    ) -> bool:
        # A lease not renewed for `idle_seconds` has at most this much of its TTL left.
        ttl_ms = int((lease_seconds - idle_seconds) * 1000)
        with _redis_reachable():
            return bool(self._release_abandoned(keys=[self.key(worker_id)], args=[owner, ttl_ms]))


class DatabaseLeaseStore:
    """Leases as ``WorkerLease`` rows, on the database's clock (``now()``), not this host's."""

    name = "database"

    def __init__(self, *, ids: range = range(WORKER_IDS)) -> None:
        self.ids = ids

    def claim(self, *, candidates: Sequence[int], owner: str, lease_seconds: int) -> int | None:
        def first_free() -> int | None:
            lapsed = Q(expires_at__lt=Now())
            for worker_id in candidates:
                if _take_row(
                    worker_id=worker_id, owner=owner, lease_seconds=lease_seconds, takeable=lapsed
                ):
                    return worker_id
            return None

        return _outside_caller_transaction(first_free)

    def renew(self, *, worker_id: int, owner: str, lease_seconds: int) -> bool:
        ours_or_lapsed = Q(owner=owner) | Q(expires_at__lt=Now())
        return _outside_caller_transaction(
            lambda: _take_row(
                worker_id=worker_id,
                owner=owner,
                lease_seconds=lease_seconds,
                takeable=ours_or_lapsed,
            )
        )

    def release(self, *, worker_id: int, owner: str) -> None:
        _outside_caller_transaction(
            lambda: WorkerLease.objects.filter(worker_id=worker_id, owner=owner).delete()
        )

    def holders(self) -> dict[int, str]:
        live = WorkerLease.objects.filter(worker_id__in=self.ids, expires_at__gte=Now())
        return _database_reachable(lambda: dict(live.values_list("worker_id", "owner")))

    def release_abandoned(
        self, *, worker_id: int, owner: str, idle_seconds: float, lease_seconds: int
    ) -> bool:
        idle = WorkerLease.objects.filter(
            worker_id=worker_id,
            owner=owner,
            heartbeat_at__lt=Now() - timedelta(seconds=idle_seconds),
        )
        return bool(_database_reachable(lambda: idle.delete()[0]))


def _take_row(*, worker_id: int, owner: str, lease_seconds: int, takeable: Q) -> bool:
    """Make ``owner`` the holder of ``worker_id`` if its row matches ``takeable`` or is missing.

    No read before the write: the ``UPDATE`` re-checks its ``WHERE`` on the row it locks (a
    concurrent claimer that committed first makes it match nothing), and of two ``INSERT`` s of a
    missing row the primary key lets exactly one through.
    """
    expires_at = Now() + timedelta(seconds=lease_seconds)
    taken = WorkerLease.objects.filter(takeable, worker_id=worker_id).update(
        owner=owner, expires_at=expires_at, heartbeat_at=Now()
    )
    if taken:
        return True
    try:
        with transaction.atomic():
            WorkerLease.objects.create(
                worker_id=worker_id, owner=owner, expires_at=expires_at, heartbeat_at=Now()
            )
    except IntegrityError:
        return False
    return True


def _outside_caller_transaction(work: Callable[[], T]) -> T:
    """Run ``work`` on a connection of its own, in autocommit mode, so the lease commits at once.

    The first order ID of a process is asked for inside the order's ``transaction.atomic()``; a
    lease written on that connection would vanish if the order rolled back while the process
    went on using the id. A short-lived thread gets its own connection (Django's are per thread).
    SQLite allows one writer at a time, so there a second connection would wait for the caller's
    own open transaction to end; SQLite is the single-process demo, and uses the caller's.
    """
    if connection.vendor == "sqlite":
        return _database_reachable(work)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="order-id-lease-db") as pool:
        return pool.submit(_on_fresh_connection, work).result()


def _on_fresh_connection(work: Callable[[], T]) -> T:
    try:
        return _database_reachable(work)
    finally:
        connections.close_all()


def _database_reachable(work: Callable[[], T]) -> T:
    try:
        return work()
    except (OperationalError, InterfaceError) as exc:
        raise LeaseStoreUnavailable(f"database unreachable: {exc}") from exc


def default_stores() -> tuple[LeaseStore, ...]:
    """Redis when configured, with the database as fallback; else the database.

    With both, the ids are split: Redis leases 0..63, the database 64..127. The two stores
    cannot see each other's leases, so this is what makes falling back (and coming back) safe:
    a process that leased in the database while a Redis node was down, or while Redis's 64 ids
    were all held, can never hold an id that another process holds in Redis, whatever the
    timing.

    Every process writing to one database must lease from the same place: two processes whose
    Redis settings differ (a rolling change of topology) could lease the same id on two nodes.
    ``ORDER_ID_LEASE_STORE=database`` makes every process lease from the database alone — set it
    for the duration of such a change (docs/scaling.md).
    """
    if redis_aliases() and settings.ORDER_ID_LEASE_STORE != "database":
        half = WORKER_IDS // 2
        return (
            RedisLeaseStore(ids=range(half)),
            DatabaseLeaseStore(ids=range(half, WORKER_IDS)),
        )
    return (DatabaseLeaseStore(),)


def free_worker_ids() -> dict[str, tuple[int, int]]:
    """(free, capacity) of every lease store this process would lease from, by store name: the
    ids a process starting now could lease. An unreachable store has none free."""
    counts: dict[str, tuple[int, int]] = {}
    for store in default_stores():
        try:
            free = len(store.ids) - len(store.holders())
        except LeaseStoreUnavailable:
            free = 0
        counts[store.name] = (free, len(store.ids))
    return counts


def lease_worker_id(
    *, stores: Sequence[LeaseStore] | None = None, lease_seconds: int | None = None
) -> WorkerLeaseHandle:
    """Lease a free worker id for this process, kept alive by a heartbeat thread until released.

    ``stores`` are tried in order, moving on when one is unreachable or has no free id.
    Raises :class:`NoWorkerIdAvailable` when all 128 ids are held.
    """
    return WorkerLeaseHandle(
        stores=default_stores() if stores is None else stores,
        lease_seconds=settings.ORDER_ID_LEASE_SECONDS if lease_seconds is None else lease_seconds,
    )


def _new_owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


def _claim_any(
    *, stores: Sequence[LeaseStore], owner: str, lease_seconds: int
) -> tuple[LeaseStore, int]:
    """Claim an id from the first store that has one free, scanning all ids from a random one.

    A store that is full or unreachable is passed over for the next: the stores lease disjoint
    ids (:func:`default_stores`), so a process that finds Redis's 64 ids all held takes one of
    the database's 64, and every process gets an id while any of the 128 is free. The random
    start spreads processes that start together over different ids, so they rarely contend for
    the same key.
    """
    start = random.randrange(WORKER_IDS)
    rotated = [(start + offset) % WORKER_IDS for offset in range(WORKER_IDS)]
    unreachable: list[LeaseStoreUnavailable] = []
    full: list[LeaseStore] = []
    for store in stores:
        candidates = [i for i in rotated if i in store.ids]
        try:
            worker_id = store.claim(candidates=candidates, owner=owner, lease_seconds=lease_seconds)
        except LeaseStoreUnavailable as exc:
            logger.warning("order-ID worker lease: %s store unreachable (%s)", store.name, exc)
            unreachable.append(exc)
            continue
        if worker_id is None:
            full.append(store)
            continue
        if full:
            logger.warning(
                "order-ID worker ids of the %s store are all leased; leased %d from the %s store",
                " and ".join(s.name for s in full),
                worker_id,
                store.name,
            )
        return store, worker_id
    if unreachable:
        raise LeaseStoreUnavailable(
            "no lease store with a free id reachable: " + "; ".join(str(exc) for exc in unreachable)
        )
    raise NoWorkerIdAvailable(
        f"all {sum(len(s.ids) for s in full)} order-ID worker ids are leased in the "
        f"{' and '.join(s.name for s in full)} store: more processes issue order IDs than the ID "
        f"layout allows ({WORKER_IDS}, docs/scaling.md)"
    )


def _heartbeat(
    handle_ref: weakref.ref[WorkerLeaseHandle], stop: threading.Event, interval: float
) -> None:
    """Renew every ``interval`` seconds until released, lost, or the handle is garbage-collected.

    Holding the handle weakly lets a dropped handle's lease lapse instead of being renewed forever.
    """
    while not stop.wait(interval):
        handle = handle_ref()
        if handle is None:
            return
        try:
            if not handle.renew():
                return
        except LeaseStoreUnavailable as exc:
            logger.warning("order-ID worker lease: renewal failed: %s", exc)
            try:
                handle.fail_over_if_expiring(interval)
            except (LeaseStoreUnavailable, NoWorkerIdAvailable) as failed:
                # every store gone at once (or full): this thread tries again next turn
                logger.warning("order-ID worker lease: no store to fail over to: %s", failed)
        except Exception:
            # The thread must outlive any surprise, or the lease would silently lapse.
            logger.exception("order-ID worker lease: renewal failed, will retry")
        del handle


class WorkerLeaseHandle:
    """This process's lease on one worker id. Create it with :func:`lease_worker_id`.

    Readers (``worker_id``, ``is_valid()``) take no lock, so issuing IDs never waits for a renewal
    round trip; claiming, renewing and releasing are serialised by a lock.
    """

    def __init__(self, *, stores: Sequence[LeaseStore], lease_seconds: int) -> None:
        if lease_seconds < 1:
            raise ValueError(f"lease_seconds must be at least 1, got {lease_seconds}")
        if not stores:
            raise ValueError("at least one lease store is needed")
        self._stores = tuple(stores)
        self._lease_seconds = lease_seconds
        self._lock = ForkSafeLock()
        self._released = False
        self._stores_for_acquire: tuple[LeaseStore, ...] | None = None
        self._acquire()

    @property
    def worker_id(self) -> int:
        """The leased id, 0..127 (in a forked child, a fresh one leased on first use)."""
        self._ensure_own_process()
        return self._worker_id

    @property
    def owner(self) -> str:
        """The owner token, ``host:pid:random``, stored with the lease."""
        self._ensure_own_process()
        return self._owner

    @property
    def valid_until(self) -> float:
        """``time.monotonic()`` value until which the id is ours (immune to wall-clock steps)."""
        self._ensure_own_process()
        return self._valid_until

    def is_valid(self) -> bool:
        """Whether IDs may be issued with this worker id right now."""
        self._ensure_own_process()
        return not self._released and time.monotonic() < self._valid_until

    def renew(self) -> bool:
        """Extend the lease; False once released.

        When another owner holds our id (Redis came back empty and a new process claimed it),
        the id is given up and a fresh one leased, so this process keeps issuing IDs under an
        id that is its own; while none can be leased it issues none, and the heartbeat tries
        again each turn. Raises :class:`LeaseStoreUnavailable` when the store cannot be
        reached; the lease then stays valid until ``valid_until`` and the heartbeat tries again.
        """
        self._ensure_own_process()
        with self._lock:
            if self._released:
                return False
            started = time.monotonic()
            if self._store.renew(
                worker_id=self._worker_id, owner=self._owner, lease_seconds=self._lease_seconds
            ):
                self._valid_until = self._deadline(started)
                return True
            lost_id, old_heartbeat = self._worker_id, self._stop
            try:
                self._acquire()
            except (NoWorkerIdAvailable, LeaseStoreUnavailable):
                # The id is another's: none is issued under it. This heartbeat goes on and
                # tries again next turn (ended here, nothing leased again, and the process
                # refused every order until it was restarted).
                self._valid_until = 0.0
                logger.exception(
                    "order-ID worker id %d was taken over and no other id can be leased now; "
                    "%s issues no order IDs until one can",
                    lost_id,
                    self._owner,
                )
                return True
            old_heartbeat.set()  # the new lease has a heartbeat of its own
        logger.error(
            "order-ID worker id %d was taken over by another owner; now using %d",
            lost_id,
            self._worker_id,
        )
        return True

    def fail_over_if_expiring(self, interval: float) -> None:
        """The store is unreachable: if the lease would lapse before the next renewal, lease a
        fresh id from the next reachable store (the database when a Redis node is lost).

        Safe at once because the stores lease disjoint ids (:func:`default_stores`). Raises
        :class:`LeaseStoreUnavailable` (or :class:`NoWorkerIdAvailable`) when no later store
        leases one; the lease and its heartbeat are then left as they were, so the heartbeat
        keeps trying (stopped first, nothing renewed the lease once a store came back, and the
        process refused every order until restarted)."""
        with self._lock:
            if self._released or self._pid != os.getpid():
                return
            if time.monotonic() + interval < self._valid_until:
                return
            remaining = self._stores[self._stores.index(self._store) + 1 :]
            if not remaining:
                return
            old_id, old_store, old_heartbeat = self._worker_id, self._store.name, self._stop
            self._stores_for_acquire = remaining
            try:
                self._acquire()
            finally:
                self._stores_for_acquire = None
            old_heartbeat.set()  # the new lease has a heartbeat of its own
        logger.warning(
            "order-ID worker id %d (%s) replaced by %d (%s) after the store became unreachable",
            old_id,
            old_store,
            self._worker_id,
            self._store.name,
        )

    def release(self) -> None:
        """Give the id back at once; a lease already taken over by another owner is left alone.

        If the store is unreachable the lease simply lapses after at most the lease length.
        """
        with self._lock:
            if self._released:
                return
            self._released = True
            if self._pid != os.getpid():
                return  # a forked child that never leased: the lease is the parent's
            self._stop.set()
            try:
                self._store.release(worker_id=self._worker_id, owner=self._owner)
            except LeaseStoreUnavailable as exc:
                logger.warning(
                    "order-ID worker id %d not released (%s); it lapses within %d s",
                    self._worker_id,
                    exc,
                    self._lease_seconds,
                )

    def _ensure_own_process(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid() and not self._released:
                self._acquire()

    def _acquire(self) -> None:
        """Lease a fresh id under a fresh owner token and start renewing it."""
        owner = _new_owner_token()
        started = time.monotonic()
        store, worker_id = _claim_any(
            stores=self._stores_for_acquire or self._stores,
            owner=owner,
            lease_seconds=self._lease_seconds,
        )
        self._pid = os.getpid()
        self._store = store
        self._worker_id = worker_id
        self._owner = owner
        self._valid_until = self._deadline(started)
        self._stop = threading.Event()
        threading.Thread(
            target=_heartbeat,
            args=(weakref.ref(self), self._stop, self._lease_seconds / 3),
            name=f"order-id-lease-{worker_id}",
            daemon=True,
        ).start()
        logger.info("order-ID worker id %d leased by %s (%s)", worker_id, owner, store.name)

    def _deadline(self, started: float) -> float:
        return started + self._lease_seconds * 2 / 3
