"""Worker-id leases against the real Redis and PostgreSQL.

Redis tests use a per-test key prefix and delete only their own keys (the Redis is shared with
other tests); database tests are transactional because leases are written on connections of their
own, outside the test's transaction.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ordering.models.worker_lease import WorkerLease
from ordering.order_ids import OrderIdGenerator, decode_order_id
from ordering.worker_ids import (
    KEY_PREFIX,
    WORKER_IDS,
    DatabaseLeaseStore,
    LeaseStore,
    LeaseStoreUnavailable,
    NoWorkerIdAvailable,
    RedisLeaseStore,
    WorkerLeaseHandle,
    default_stores,
    lease_worker_id,
)
from tenants.redis_routing import _cluster_client
from tests.conftest import use_topology
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode, start_cluster, wait_until

LeaseFactory = Callable[..., WorkerLeaseHandle]


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    if not settings.REDIS_URL:
        pytest.fail("these tests need the real Redis: set REDIS_URL (make test does)")
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_store(redis_client: redis.Redis) -> Iterator[RedisLeaseStore]:
    """A Redis lease store under a prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:orderid:worker:"
    yield RedisLeaseStore(key_prefix=prefix)
    keys = list(redis_client.scan_iter(match=f"{prefix}*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def lease() -> Iterator[LeaseFactory]:
    """Lease worker ids (30 s unless told); every handle is released after the test."""
    handles: list[WorkerLeaseHandle] = []

    def make(*, stores: list[LeaseStore], lease_seconds: int = 30) -> WorkerLeaseHandle:
        handle = lease_worker_id(stores=stores, lease_seconds=lease_seconds)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.release()


def test_redis_handles_never_share_an_id_and_the_129th_is_refused(
    lease: LeaseFactory, redis_store: RedisLeaseStore, redis_client: redis.Redis
) -> None:
    handles = [lease(stores=[redis_store]) for _ in range(WORKER_IDS)]

    assert sorted(h.worker_id for h in handles) == list(range(WORKER_IDS))
    for handle in handles:
        assert redis_client.get(redis_store.key(handle.worker_id)) == handle.owner
        assert 0 < redis_client.ttl(redis_store.key(handle.worker_id)) <= 30
    with pytest.raises(NoWorkerIdAvailable, match="all 128"):
        lease_worker_id(stores=[redis_store], lease_seconds=30)


def test_db_handles_claimed_by_8_concurrent_threads_get_distinct_ids(
    transactional_db: None, lease: LeaseFactory
) -> None:
    start = threading.Barrier(8)
    results: list[WorkerLeaseHandle | BaseException] = []

    def claim() -> None:
        start.wait()
        try:
            results.append(lease(stores=[DatabaseLeaseStore()]))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    handles = [r for r in results if isinstance(r, WorkerLeaseHandle)]
    assert len(handles) == 8, results
    assert len({h.worker_id for h in handles}) == 8
    rows = dict(WorkerLease.objects.values_list("worker_id", "owner"))
    assert rows == {h.worker_id: h.owner for h in handles}


def test_db_claim_skips_held_ids_and_refuses_when_all_are_held(
    transactional_db: None, lease: LeaseFactory
) -> None:
    held_until = timezone.now() + timedelta(minutes=5)
    WorkerLease.objects.bulk_create(
        WorkerLease(worker_id=n, owner="other", expires_at=held_until, heartbeat_at=timezone.now())
        for n in range(WORKER_IDS)
        if n != 77
    )

    assert lease(stores=[DatabaseLeaseStore()]).worker_id == 77
    with pytest.raises(NoWorkerIdAvailable, match="database"):
        lease(stores=[DatabaseLeaseStore()])


def test_db_lease_outlives_the_callers_rolled_back_transaction(
    transactional_db: None, lease: LeaseFactory
) -> None:
    # The first order ID of a process is asked for inside the order's transaction.
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = lease(stores=[DatabaseLeaseStore()])
        raise RuntimeError("the order failed")

    assert WorkerLease.objects.get(worker_id=handle.worker_id).owner == handle.owner


def test_expired_db_lease_is_reclaimed_and_its_old_holder_moves_on(
    transactional_db: None, lease: LeaseFactory
) -> None:
    store = DatabaseLeaseStore()
    handle = lease(stores=[store])
    n = handle.worker_id
    generator = OrderIdGenerator(worker_lease=handle)
    generator.next_id(shard=0, dish_bucket=0)

    assert store.claim(candidates=[n], owner="other", lease_seconds=30) is None
    WorkerLease.objects.filter(worker_id=n).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert store.claim(candidates=[n], owner="other", lease_seconds=30) == n

    # the old holder notices at its next renewal and leases another id
    assert handle.renew() is True
    assert handle.worker_id != n and handle.is_valid()
    assert decode_order_id(generator.next_id(shard=0, dish_bucket=0)).worker_id == handle.worker_id
    handle.release()  # releases its new id, never the one "other" holds now
    assert WorkerLease.objects.get(worker_id=n).owner == "other"


def test_a_redis_lease_taken_over_is_replaced_by_a_fresh_id(
    lease: LeaseFactory, redis_store: RedisLeaseStore, redis_client: redis.Redis
) -> None:
    # given a process issuing IDs under its leased id
    handle = lease(stores=[redis_store])
    generator = OrderIdGenerator(worker_lease=handle)
    lost_id = handle.worker_id
    first = generator.next_id(shard=1, dish_bucket=2)
    assert decode_order_id(first).worker_id == lost_id
    # when Redis lost the key and another process claimed the id (e.g. after a restart)
    key = redis_store.key(lost_id)
    redis_client.set(key, "someone-else", ex=30)
    # then the next renewal leases a fresh id, and IDs go on under the new id only
    assert handle.renew() is True
    assert handle.is_valid() and handle.worker_id != lost_id
    later = generator.next_id(shard=1, dish_bucket=2)
    assert decode_order_id(later).worker_id == handle.worker_id
    assert redis_client.get(key) == "someone-else"  # the other process keeps its id
    handle.release()
    assert redis_client.get(key) == "someone-else"


def test_lapsed_redis_lease_nobody_took_is_taken_back_on_renewal(
    lease: LeaseFactory, redis_store: RedisLeaseStore, redis_client: redis.Redis
) -> None:
    handle = lease(stores=[redis_store])
    key = redis_store.key(handle.worker_id)
    redis_client.delete(key)  # as if it had expired during an outage

    assert handle.renew() is True
    assert redis_client.get(key) == handle.owner
    assert redis_client.ttl(key) > 0


def test_heartbeat_keeps_a_short_lease_alive_and_notices_a_takeover(
    lease: LeaseFactory, redis_store: RedisLeaseStore, redis_client: redis.Redis
) -> None:
    handle = lease(stores=[redis_store], lease_seconds=1)  # heartbeat every 1/3 s
    key = redis_store.key(handle.worker_id)

    time.sleep(1.2)  # longer than the lease itself
    assert handle.is_valid()
    assert redis_client.get(key) == handle.owner

    lost_id = handle.worker_id
    redis_client.set(key, "someone-else", ex=30)
    deadline = time.monotonic() + 2
    while handle.worker_id == lost_id and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.worker_id != lost_id and handle.is_valid()
    assert redis_client.get(key) == "someone-else"


@pytest.mark.parametrize("mode", ["redis", "database"])
def test_release_frees_the_id_at_once(
    mode: str, request: pytest.FixtureRequest, lease: LeaseFactory
) -> None:
    if mode == "redis":
        store: Any = request.getfixturevalue("redis_store")
    else:
        request.getfixturevalue("transactional_db")
        store = DatabaseLeaseStore()
    handle = lease(stores=[store])
    n = handle.worker_id

    handle.release()

    assert not handle.is_valid()
    assert handle.renew() is False
    assert store.claim(candidates=[n], owner="next", lease_seconds=30) == n
    handle.release()  # twice is harmless and still leaves the next holder alone
    assert store.renew(worker_id=n, owner="next", lease_seconds=30) is True


def test_falls_back_to_the_database_when_redis_is_unreachable(
    transactional_db: None, settings: Any
) -> None:
    use_topology(settings, shards=["redis://127.0.0.1:1/0"])  # nothing listens on port 1

    handle = lease_worker_id(lease_seconds=30)
    try:
        assert WorkerLease.objects.get(worker_id=handle.worker_id).owner == handle.owner
        assert handle.is_valid() and handle.worker_id >= 64  # the database's half of the ids
    finally:
        handle.release()
    assert not WorkerLease.objects.filter(worker_id=handle.worker_id).exists()


def test_a_forked_child_leases_its_own_worker_id(
    lease: LeaseFactory, redis_store: RedisLeaseStore, redis_client: redis.Redis
) -> None:
    handle = lease(stores=[redis_store])
    generator = OrderIdGenerator(worker_lease=handle)
    parent_id = generator.next_id(shard=3, dish_bucket=3)

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, give the id back, and leave without running pytest's exit
        try:
            child_id = generator.next_id(shard=3, dish_bucket=3)
            os.write(write_end, f"{child_id} {handle.owner}".encode())
            handle.release()
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child_id_text, child_owner = pipe.read().split()
    os.waitpid(pid, 0)

    child = decode_order_id(int(child_id_text))
    assert child.worker_id != decode_order_id(parent_id).worker_id == handle.worker_id
    assert child_owner.split(":")[1] == str(pid)
    assert redis_client.get(redis_store.key(child.worker_id)) is None  # released by the child
    assert redis_client.get(redis_store.key(handle.worker_id)) == handle.owner
    assert handle.is_valid()


def test_lease_follows_the_routing_and_survives_losing_its_node(
    transactional_db: None, settings: Any
) -> None:
    # given the leases on a Redis node of their own (sharded topology of one test-owned node)
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        handle = lease_worker_id(lease_seconds=3)
        generator = OrderIdGenerator(worker_lease=handle)
        first = generator.next_id(shard=1, dish_bucket=1)
        assert handle.worker_id < 64
        assert node.client().get(f"{KEY_PREFIX}{handle.worker_id}") == handle.owner.encode()
        # when the node is lost and the lease nears its end
        node.stop()
        with pytest.raises(LeaseStoreUnavailable):
            handle.renew()
        handle.fail_over_if_expiring(interval=10)
        # then the process holds an id of the database's half and keeps issuing unique IDs
        assert handle.worker_id >= 64 and handle.is_valid()
        assert WorkerLease.objects.get(worker_id=handle.worker_id).owner == handle.owner
        later = generator.next_id(shard=1, dish_bucket=1)
        assert later != first and decode_order_id(later).worker_id == handle.worker_id
        handle.release()
    finally:
        node.remove()


class CountedClaims(RedisLeaseStore):
    """A Redis lease store that counts the claims made of it (each a try to lease an id)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.claims = 0

    def claim(self, *, candidates: Any, owner: str, lease_seconds: int) -> int | None:
        self.claims += 1
        return super().claim(candidates=candidates, owner=owner, lease_seconds=lease_seconds)


def test_a_lease_lapsed_while_every_store_was_unreachable_is_renewed_once_one_is_back(
    settings: Any,
) -> None:
    """Both lease stores unreachable as the lease nears its end (Redis and PostgreSQL gone
    together: the host's network, a failover of both): the heartbeat's fail-over found no
    store to lease from, and its error ended the heartbeat thread, whose stop it had already
    set. Nothing renewed the lease again, so the process answered every order 503
    ORDER_ID_UNAVAILABLE until it was restarted. Now the heartbeat goes on trying, and the
    lease is taken back once a store answers."""
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        half = WORKER_IDS // 2
        prefix = f"test:{uuid.uuid4().hex[:12]}:orderid:worker:"
        fallback = CountedClaims(key_prefix=prefix, ids=range(half, WORKER_IDS))
        handle = lease_worker_id(
            stores=[RedisLeaseStore(ids=range(half)), fallback], lease_seconds=1
        )
        try:
            node.stop()  # both stores live on this node: neither can be reached
            wait_until(lambda: not handle.is_valid(), what="the lease lapsing")
            # the heartbeat tries to fail over again and again, not once
            wait_until(lambda: fallback.claims >= 3, what="fail-over tries after the first")
            node.start()
            wait_until(handle.is_valid, what="the lease renewed once Redis is back")
        finally:
            handle.release()
    finally:
        node.remove()


def _demoted(node: RedisNode) -> None:
    """The node became a replica (a failover promoted another): writes answer READONLY."""
    node.client().replicaof("127.0.0.1", free_port())


def _full(node: RedisNode) -> None:
    """The node is out of memory and evicts nothing: writes answer OOM."""
    node.client().config_set("maxmemory-policy", "noeviction")
    node.client().config_set("maxmemory", 1)


@pytest.mark.parametrize("refuse", [_demoted, _full], ids=["demoted-to-replica", "out-of-memory"])
def test_a_node_that_refuses_writes_sends_leases_to_the_database(
    transactional_db: None, settings: Any, refuse: Callable[[RedisNode], None]
) -> None:
    # given a lease on a Redis node of the test's own
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        handle = lease_worker_id(lease_seconds=30)  # its heartbeat stays out of the way
        assert handle.worker_id < 64
        # when the node answers but refuses every write
        refuse(node)
        # then a process starting now leases from the database's half (it answered every order
        # it was sent 500), and the holder keeps an id: its renewal (an EXPIRE, which a full
        # node still takes) goes on, or fails over to the database's half like an unreachable
        # node's (a replica takes no write at all)
        try:
            handle.renew()
        except LeaseStoreUnavailable:
            handle.fail_over_if_expiring(interval=30)
            assert handle.worker_id >= 64
        assert handle.is_valid()
        fresh = lease_worker_id(lease_seconds=30)
        assert fresh.worker_id >= 64 and fresh.worker_id != handle.worker_id
        fresh.release()
        handle.release()
    finally:
        node.remove()


@pytest.mark.slow
@pytest.mark.fault
def test_a_cluster_that_is_down_sends_leases_to_the_database(
    transactional_db: None, settings: Any
) -> None:
    # given the leases on a Redis Cluster of three masters and no replicas
    nodes = start_cluster(3)
    try:
        use_topology(settings, cluster=nodes[0].url)
        handle = lease_worker_id(lease_seconds=30)  # its heartbeat stays out of the way
        assert handle.worker_id < 64
        # when a master that holds neither the lease nor the client's address is lost: the
        # others, the lease's among them, answer every command CLUSTERDOWN
        holder = _cluster_client(nodes[0].url).get_node_from_key(f"{KEY_PREFIX}{handle.worker_id}")
        lost = next(n for n in nodes[1:] if n.port != holder.port)
        lost.stop()
        wait_until(
            lambda: nodes[0].client().cluster("info")["cluster_state"] == "fail",
            what="the cluster's failure",
        )
        # then the lease store counts as unreachable, like a node that refuses connections:
        # the renewal fails over to the database's half, and a new process leases there
        with pytest.raises(LeaseStoreUnavailable):
            handle.renew()
        handle.fail_over_if_expiring(interval=30)
        assert handle.worker_id >= 64 and handle.is_valid()
        fresh = lease_worker_id(lease_seconds=3)
        assert fresh.worker_id >= 64 and fresh.worker_id != handle.worker_id
        fresh.release()
        handle.release()
    finally:
        for node in nodes:
            node.remove()


def test_lease_store_can_be_forced_to_the_database(transactional_db: None, settings: Any) -> None:
    settings.ORDER_ID_LEASE_STORE = "database"
    [store] = default_stores()
    assert isinstance(store, DatabaseLeaseStore) and store.ids == range(WORKER_IDS)


def test_a_full_redis_range_falls_back_to_the_database_range(
    transactional_db: None, lease: LeaseFactory, redis_client: redis.Redis
) -> None:
    # given the two stores as configured with Redis (Redis 0..63, the database 64..127)
    prefix = f"test:{uuid.uuid4().hex[:12]}:orderid:worker:"
    redis_half, db_half = (
        RedisLeaseStore(key_prefix=prefix, ids=range(64)),
        DatabaseLeaseStore(ids=range(64, WORKER_IDS)),
    )
    assert [s.ids for s in default_stores()] == [redis_half.ids, db_half.ids]
    stores: list[LeaseStore] = [redis_half, db_half]
    try:
        # when 64 processes hold every Redis id
        in_redis = [lease(stores=stores) for _ in range(64)]
        assert sorted(h.worker_id for h in in_redis) == list(range(64))
        assert not WorkerLease.objects.exists()
        # then the next one gets an id of the database's range
        fallback = lease(stores=stores)
        assert fallback.worker_id >= 64 and fallback.is_valid()
        assert WorkerLease.objects.get(worker_id=fallback.worker_id).owner == fallback.owner
        assert all(h.is_valid() for h in in_redis)
        # and only when the database's are all held too is a process refused
        held_until = timezone.now() + timedelta(minutes=5)
        WorkerLease.objects.bulk_create(
            WorkerLease(worker_id=n, owner="other", expires_at=held_until, heartbeat_at=held_until)
            for n in range(64, WORKER_IDS)
            if n != fallback.worker_id
        )
        with pytest.raises(NoWorkerIdAvailable, match=r"all 128 .* redis and database"):
            lease(stores=stores)
        # and an id given back in Redis is the next one leased
        in_redis[7].release()
        assert lease(stores=stores).worker_id == in_redis[7].worker_id
    finally:
        keys = list(redis_client.scan_iter(match=f"{prefix}*"))
        if keys:
            redis_client.delete(*keys)


def test_an_id_taken_over_while_none_is_free_is_leased_again_once_one_is(
    redis_client: redis.Redis,
) -> None:
    """Another process holds this process's id (Redis came back without the lease, and a new
    process claimed it) while no other id can be leased: the handle marked itself lost for
    good and its heartbeat ended, so the process refused every order until it was restarted.
    It issues no ID under the id that is not its own, and leases again once one is free."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:orderid:worker:"
    store = RedisLeaseStore(key_prefix=prefix, ids=range(1))  # one id: none to fall back on
    handle = lease_worker_id(stores=[store], lease_seconds=1)
    try:
        assert handle.worker_id == 0
        redis_client.set(store.key(0), "another-process", ex=60)  # taken over
        wait_until(lambda: not handle.is_valid(), what="the taken-over id given up")
        store.release(worker_id=0, owner="another-process")
        wait_until(handle.is_valid, what="an id leased again once one is free")
        assert redis_client.get(store.key(0)) == handle.owner
    finally:
        handle.release()
