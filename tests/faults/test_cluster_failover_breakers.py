"""A cluster master that a failover demoted takes its breaker with it.

Breakers are per master (``cluster:<host>:<port>``). A master that fails over while its breaker
is open (paused past the node timeout: its calls time out, the breaker opens, its replica takes
its slots) serves no tenant any more, so no request ever probes that breaker again: it stayed
open in ``idempotency_breaker_state`` and on the admin's audits page for the life of every
process, and ``RedisBreakerOpen`` paged for a node no tenant used while every tenant was back
on the Redis path.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.cluster import RedisCluster

from idempotency.stores import nodes as stores
from idempotency.stores.breaker import BreakerState
from tenants.models import Tenant
from tenants.redis_routing import client_for_tenant
from tests.conftest import api_for, menu_for, use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.support.redis_nodes import RedisNode, start_cluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db]

BREAKER = {"min_calls": 5, "open_seconds": 1, "p99_threshold_ms": 200, "window_seconds": 60}


@pytest.fixture
def replicated_cluster() -> Iterator[list[RedisNode]]:
    """Three masters, and a replica of the first one (the last node)."""
    nodes = start_cluster(3)
    replica = RedisNode(cluster=True).start()
    try:
        bus_port = nodes[0].client().config_get("cluster-port")["cluster-port"]
        replica.client().execute_command("CLUSTER MEET", "127.0.0.1", nodes[0].port, bus_port)
        master_id = nodes[0].client().execute_command("CLUSTER MYID").decode()
        wait_until(
            lambda: replica.client().execute_command("CLUSTER REPLICATE", master_id),
            what="the replica to know its master",
            ignoring=(Exception,),
        )
        wait_until(
            lambda: replica.client().info("replication").get("master_link_status") == "up",
            what="the replica in sync",
        )
        yield [*nodes, replica]
    finally:
        for node in [*nodes, replica]:
            node.remove()


def _tenant_on(port: int, make_tenant: Callable[..., Tenant]) -> Tenant:
    """A new tenant whose slot the master on ``port`` serves."""
    client = RedisCluster(host="127.0.0.1", port=port)
    try:
        while True:
            tenant = make_tenant()
            if client.get_node_from_key(f"{{t:{tenant.pk}}}").port == port:
                return tenant
    finally:
        client.close()


def test_a_master_demoted_by_a_failover_leaves_no_open_breaker(
    settings: Any, replicated_cluster: list[RedisNode], make_tenant: Callable[..., Tenant]
) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "BREAKER": BREAKER}
    master, replica = replicated_cluster[0], replicated_cluster[-1]
    use_topology(settings, cluster=master.url)
    tenant = _tenant_on(master.port, make_tenant)
    api, menu = api_for(tenant, diner="d1"), menu_for(tenant, 1000)
    assert post_order(api, menu, key="before")["X-Idempotent-Result"] == "MISS"
    old, new = f"cluster:127.0.0.1:{master.port}", f"cluster:127.0.0.1:{replica.port}"
    assert set(stores.breaker_states()) == {old}

    # given the master paused past the cluster's node timeout: its calls time out, its breaker
    # opens, and its replica takes its slots over
    assert master.process is not None
    master.process.send_signal(signal.SIGSTOP)
    try:
        i = 0
        while stores.breaker_states()[old] != BreakerState.OPEN.value:
            assert post_order(api, menu, key=f"paused-{i}").status_code == 201
            i += 1
        assert REGISTRY.get_sample_value("idempotency_breaker_state", {"node": old}) == 2
        wait_until(
            lambda: replica.client().info("replication")["role"] == "master",
            what="the replica promoted",
        )
    finally:
        master.process.send_signal(signal.SIGCONT)
    wait_until(
        lambda: master.client().info("replication")["role"] == "slave", what="the master demoted"
    )

    # and the process's cluster client has read the new slot map, as any other call through it
    # does once it meets the moved slot (the instance heartbeat, the script channel)
    client_for_tenant(str(tenant.pk)).get(f"{{t:{tenant.pk}}}:elsewhere")

    # when the tenant's orders go on: they reach the new master, whose breaker is closed
    i = 0
    while stores.breaker_states().get(new) != BreakerState.CLOSED.value:
        assert post_order(api, menu, key=f"after-{i}").status_code == 201
        i += 1
    assert post_order(api, menu, key="last")["X-Idempotent-Result"] == "MISS"

    # then nothing reports the demoted master's breaker open: it serves no tenant
    assert stores.breaker_states().get(old) != BreakerState.OPEN.value
    assert REGISTRY.get_sample_value("idempotency_breaker_state", {"node": old}) != 2
