"""Stale-lease recovery on three shards and on a three-master cluster: a crashed process's
claims and a dead instance's worker-id leases are freed on the node that holds them.

The claims are made by a real process that is then SIGKILLed; its instance goes silent in the
registry (on the node the routing assigns ``__instances__``). Worker-id leases are placed with
the real lease store of the topology; their owner's silence and their last renewal are set by
hand, as in ``test_instances.py``, because with real timing a lease is reclaimable only seconds
before it lapses on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from idempotency.core.keys import redis_key_for
from idempotency.stores import instances
from idempotency.stores.redis_store import RedisIdempotencyStore
from ordering.instances import reclaim_stale_leases
from ordering.worker_ids import RedisLeaseStore
from tenants.redis_routing import client_for_tenant
from tests.conftest import use_topology
from tests.ordering.test_order_ids import PROJECT_ROOT

pytestmark = pytest.mark.django_db

LEASE = 30
FP = {1: "f" * 64}

_CRASHING_PROCESS = """
import json, sys, time
import django

django.setup()
from idempotency.core.keys import redis_key_for
from idempotency.stores import instances
from idempotency.stores.redis_store import RedisIdempotencyStore, new_owner_token
from tenants.redis_routing import client_for_tenant

keys = []
for tenant in sys.argv[1:]:
    key = redis_key_for(tenant=tenant, scope="crash", key="k")
    RedisIdempotencyStore(client_for_tenant(tenant)).claim(
        key=key, fingerprints={1: "f" * 64}, current_version=1, owner=new_owner_token(),
        lease_ms=600_000,
    )
    keys.append(key)
instances.beat(instances.instance_id())
print(json.dumps({"instance": instances.instance_id(), "keys": keys}), flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["shards", "cluster"])
def topology(request: pytest.FixtureRequest, settings: Any) -> dict[str, str]:
    """The app on three test-owned shard nodes, or on the three-master cluster, with instances
    dead after 1 s of silence; returns the environment that puts a process on the same nodes."""
    if request.param == "shards":
        nodes = request.getfixturevalue("shard_nodes")
        use_topology(settings, shards=[n.url for n in nodes])
        env = {"REDIS_SHARDS": ",".join(n.url for n in nodes), "REDIS_CLUSTER_URL": ""}
    else:
        nodes = request.getfixturevalue("cluster_nodes")
        use_topology(settings, cluster=nodes[0].url)
        env = {"REDIS_CLUSTER_URL": nodes[0].url, "REDIS_SHARDS": ""}
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "INSTANCE_DEAD_AFTER_SECONDS": 1.0}
    settings.ORDER_ID_LEASE_SECONDS = LEASE
    return {**env, "REDIS_URL": ""}


def tenant_of(key: str) -> str:
    return key.split("{t:", 1)[1].split("}", 1)[0]


def node_of(key: str) -> str:
    """Which node holds ``key``: the shard's address, or the cluster master serving its slot."""
    client = client_for_tenant("__instances__")
    if isinstance(client, RedisCluster):
        return client.get_node_from_key(key).name
    kwargs = client_for_tenant(tenant_of(key)).connection_pool.connection_kwargs
    return f"{kwargs['host']}:{kwargs['port']}"


@pytest.fixture
def crashed(topology: dict[str, str]) -> Iterator[dict[str, Any]]:
    """A process that claimed one key of each of 12 tenants (4 on every node), then was
    SIGKILLed."""
    run = uuid.uuid4().hex[:8]
    by_node: dict[str, list[str]] = {}
    candidates = (f"stale-{run}-{i}" for i in range(10_000))
    while len(by_node) < 3 or any(len(on_node) < 4 for on_node in by_node.values()):
        tenant = next(candidates)
        on_node = by_node.setdefault(
            node_of(redis_key_for(tenant=tenant, scope="crash", key="k")), []
        )
        if len(on_node) < 4:
            on_node.append(tenant)
    tenants = [tenant for on_node in by_node.values() for tenant in on_node]
    env = {
        **os.environ,
        **topology,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "INSTANCE_HEARTBEAT_SECONDS": "0.2",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_PROCESS, *tenants],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        state = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait(10)
    yield {**state, "tenants": tenants}
    for tenant in tenants:
        client = client_for_tenant(tenant)
        for key in client.scan_iter(match=f"idem:{{t:{tenant}}}:*"):
            client.delete(key)
    instances.registry_client().zrem(instances.REGISTRY_KEY, state["instance"])


def register(instance: str, *, silent_for: float) -> None:
    client = instances.registry_client()
    now = int(client.eval("return redis.call('TIME')[1]", 1, instances.REGISTRY_KEY))
    client.zadd(instances.REGISTRY_KEY, {instance: now - silent_for})


def test_a_crashed_process_loses_its_claims_on_every_node(crashed):
    # given the claims of a SIGKILLed process, on every node of the topology
    keys = crashed["keys"]
    assert len({node_of(k) for k in keys}) == 3
    # and a live instance's claim on one of the same nodes
    live = f"livehost:1:{uuid.uuid4().hex[:8]}"
    tenant = crashed["tenants"][0]
    live_key = redis_key_for(tenant=tenant, scope="live", key="k")
    store = RedisIdempotencyStore(client_for_tenant(tenant))
    store.claim(
        key=live_key, fingerprints=FP, current_version=1, owner=f"{live}/t", lease_ms=60_000
    )

    # when recovery runs until the crashed instance is judged dead (1 s of silence)
    def left() -> list[str]:
        return [k for k in keys if client_for_tenant(tenant_of(k)).exists(k)]

    deadline = time.monotonic() + 30
    released = 0
    while left() and time.monotonic() < deadline:
        register(live, silent_for=0)
        released += reclaim_stale_leases().claims_released
        time.sleep(0.2)

    # then each of its claims is gone from its node, long before its 600 s lease (other silent
    # instances of the test run may lose claims too: the count is at least ours)
    assert left() == [] and released >= len(keys)
    assert store.client.hget(live_key, "own") == f"{live}/t".encode()
    store.release(key=live_key, owner=f"{live}/t")
    instances.registry_client().zrem(instances.REGISTRY_KEY, live)


def test_worker_ids_of_a_dead_instance_are_freed_where_they_are_leased(topology):
    # given a long-dead instance and a live one on the registry of this topology
    run = uuid.uuid4().hex[:6]
    dead, live = f"deadhost-{run}:4242:aaaa", f"livehost-{run}:77:bbbb"
    register(dead, silent_for=LEASE * 2)
    register(live, silent_for=0)
    # and, in the lease store the leasing processes use (the node ``order-id-workers`` routes
    # to; on the cluster every key on its own slot's master): six abandoned leases of the dead
    # instance (not renewed for 2/3 of the lease), one it renewed lately, one of the live one
    store = RedisLeaseStore(ids=range(64))
    free = [n for n in range(64) if n not in store.holders()]
    owners = {n: f"deadhost-{run}:4242:{n}" for n in free[:6]}
    owners[free[6]] = f"deadhost-{run}:4242:renewed"
    owners[free[7]] = f"livehost-{run}:77:live"
    try:
        for n, owner in owners.items():
            ttl = LEASE if n == free[6] else LEASE // 3 - 1
            assert store.claim(candidates=[n], owner=owner, lease_seconds=ttl) == n
        if topology.get("REDIS_CLUSTER_URL"):
            client = client_for_tenant("__instances__")
            masters = {client.get_node_from_key(store.key(n)).name for n in free[:6]}
            assert len(masters) >= 2

        report = reclaim_stale_leases()

        # then the abandoned ones are free; the renewed and the live instance's are kept
        holders = store.holders()
        assert report.worker_leases_released >= 6
        assert not set(free[:6]) & set(holders)
        assert {n: holders.get(n) for n in free[6:8]} == {n: owners[n] for n in free[6:8]}
        census = instances.census()
        assert dead not in census.last_seen and live in census.last_seen
    finally:
        for n, owner in owners.items():
            store.release(worker_id=n, owner=owner)
        instances.registry_client().zrem(instances.REGISTRY_KEY, dead, live)
