"""One breaker per cluster master: a slow or unreachable master degrades only the tenants whose
slots it serves.

A three-master cluster of this module's own, with the delaying proxy (``tests/support/
slow_proxy.py``) in front of one master: that master announces the proxy's port
(``cluster-announce-port``), so every cluster client reaches it through the proxy only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.cluster import RedisCluster

from idempotency.stores import nodes as stores
from idempotency.stores.breaker import BreakerState
from tenants.models import Tenant
from tests.conftest import api_for, menu_for, use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.support.redis_nodes import RedisNode, start_cluster
from tests.support.slow_proxy import SlowProxy
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db]

BREAKER = {"min_calls": 5, "open_seconds": 5, "p99_threshold_ms": 200, "window_seconds": 60}
DELAY = 0.3


@dataclass
class ProxiedCluster:
    nodes: list[RedisNode]
    proxy: SlowProxy
    slow: RedisNode  # the master behind the proxy

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def slow_name(self) -> str:
        """The breaker (and metric) name of the slow master: the address clients reach it by."""
        return f"cluster:127.0.0.1:{self.proxy.port}"


@pytest.fixture(scope="module")
def proxied_cluster() -> Iterator[ProxiedCluster]:
    nodes = start_cluster(3)
    slow = nodes[1]
    proxy = SlowProxy(slow.port)
    try:
        slow.client().config_set("cluster-announce-port", proxy.port)
        wait_until(
            lambda: all(any(s[2][1] == proxy.port for s in _slots(n)) for n in nodes),
            what="every node to announce the proxy",
        )
        yield ProxiedCluster(nodes=nodes, proxy=proxy, slow=slow)
    finally:
        proxy.close()
        for node in nodes:
            node.remove()


def _slots(node: RedisNode) -> list[Any]:
    return node.client().execute_command("CLUSTER SLOTS")


@dataclass
class Shop:
    tenant: Tenant
    api: Any
    menu: Any
    home: RedisNode  # the master serving the tenant's slot, reached directly (not proxied)

    def order(self, key: str) -> Any:
        stores.local_cache().clear()
        return post_order(self.api, self.menu, key=key)

    def in_redis(self) -> int:
        """How many of the tenant's idempotency keys its master holds."""
        return len(list(self.home.client().scan_iter(match=f"idem:{{t:{self.tenant.pk}}}:*")))


@pytest.fixture
def shops(
    settings: Any, proxied_cluster: ProxiedCluster, make_tenant: Callable[..., Tenant]
) -> dict[str, list[Shop]]:
    """Two tenants served by the slow master, and one served by each of the other two."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "BREAKER": BREAKER}
    use_topology(settings, cluster=proxied_cluster.url)
    proxied_cluster.proxy.delay = 0.0
    proxied_cluster.proxy.heal()
    client = RedisCluster(host="127.0.0.1", port=proxied_cluster.nodes[0].port)
    by_port = {n.port: n for n in proxied_cluster.nodes}
    by_port[proxied_cluster.proxy.port] = proxied_cluster.slow
    wanted = {port: 1 for port in by_port} | {proxied_cluster.proxy.port: 2}
    wanted.pop(proxied_cluster.slow.port)  # reached through the proxy only
    by_master: dict[int, list[Shop]] = {port: [] for port in wanted}
    while any(len(by_master[port]) < n for port, n in wanted.items()):
        tenant = make_tenant()
        port = client.get_node_from_key(f"{{t:{tenant.pk}}}").port
        if len(by_master[port]) < wanted[port]:
            by_master[port].append(
                Shop(tenant, api_for(tenant, diner="d1"), menu_for(tenant, 1000), by_port[port])
            )
    client.close()
    groups = {"slow": by_master.pop(proxied_cluster.proxy.port)}
    groups["healthy"] = [shop for shops in by_master.values() for shop in shops]
    for node in proxied_cluster.nodes:
        node.client().flushall()
    return groups


def breaker_of(name: str) -> BreakerState:
    return BreakerState(stores.breaker_states()[name])


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value("idempotency_breaker_state", {"node": name})


def half_opened(caplog: pytest.LogCaptureFixture, name: str) -> int:
    """How often the breaker of ``name`` went half-open (let a probe through) so far."""
    prefix = f"redis breaker {name}: open -> half_open"
    return sum(1 for r in caplog.records if r.getMessage().startswith(prefix))


# How a master falls sick, and how it heals: every command 300 ms slower, or every connection
# to it dropped (a dead server, as its clients see it; the cluster's own bus stays up).
FAULTS: dict[str, tuple[Callable[[SlowProxy], None], Callable[[SlowProxy], None]]] = {
    "slow": (lambda p: setattr(p, "delay", DELAY), lambda p: setattr(p, "delay", 0.0)),
    "unreachable": (SlowProxy.cut, SlowProxy.heal),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_sick_master_degrades_only_its_tenants_then_recovers(
    proxied_cluster, shops, caplog, fault
):
    caplog.set_level(logging.INFO, logger="idempotency.stores.breaker")
    fall_sick, heal = FAULTS[fault]
    slow, healthy = shops["slow"], shops["healthy"]
    # given every tenant on the Redis path: each first execution leaves its key in Redis
    for shop in slow + healthy:
        assert shop.order("warm")["X-Idempotent-Result"] == "MISS"
        assert shop.in_redis() == 1
    names = set(stores.breaker_states())
    assert proxied_cluster.slow_name in names and len(names) == 3  # one breaker per master

    # when the master behind the proxy turns slow or unreachable
    fall_sick(proxied_cluster.proxy)
    for i in range(10):
        assert slow[i % 2].order(f"slowing-{i}").status_code == 201
        if breaker_of(proxied_cluster.slow_name) is BreakerState.OPEN:
            break
    # then its breaker opens, and only its breaker
    assert breaker_of(proxied_cluster.slow_name) is BreakerState.OPEN
    assert gauge(proxied_cluster.slow_name) == 2
    for name in names - {proxied_cluster.slow_name}:
        assert breaker_of(name) is BreakerState.CLOSED and gauge(name) == 0

    # and while it is open its tenants run database-only: first executions and replays work,
    # and no new key reaches Redis; the other masters' tenants keep the Redis path
    breaker = stores.node_for(str(slow[0].tenant.pk)).breaker
    degraded = 0
    for i in range(4):
        for shop in slow:
            before, probes = shop.in_redis(), half_opened(caplog, proxied_cluster.slow_name)
            first = shop.order(f"degraded-{i}")
            assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
            replay = shop.order(f"degraded-{i}")
            assert replay["X-Idempotent-Result"] == "HIT" and replay.content == first.content
            if half_opened(caplog, proxied_cluster.slow_name) == probes:  # no probe meanwhile
                assert breaker.state is BreakerState.OPEN and shop.in_redis() == before
                degraded += 1
        for shop in healthy:
            before = shop.in_redis()
            assert shop.order(f"healthy-{i}")["X-Idempotent-Result"] == "MISS"
            assert shop.in_redis() == before + 1
    assert degraded >= 2
    assert breaker_of(proxied_cluster.slow_name) is not BreakerState.CLOSED

    # when the master is healthy again, probes close its breaker and its tenants return to Redis
    heal(proxied_cluster.proxy)
    wait_until(lambda: breaker.state is not BreakerState.OPEN, what="half-open")
    deadline = time.monotonic() + DEADLINE_SECONDS
    i = 0
    while breaker.state is not BreakerState.CLOSED and time.monotonic() < deadline:
        assert slow[i % 2].order(f"recovering-{i}").status_code == 201
        i += 1
    assert breaker.state is BreakerState.CLOSED and gauge(proxied_cluster.slow_name) == 0
    for shop in slow:
        before = shop.in_redis()
        assert shop.order("back")["X-Idempotent-Result"] == "MISS"
        assert shop.in_redis() == before + 1


def test_the_breaker_follows_the_slot_not_the_cluster(proxied_cluster, shops):
    # a hot tenant's sub-bucket keys are judged by the master of their own slot
    client = RedisCluster(host="127.0.0.1", port=proxied_cluster.nodes[0].port)
    tenant = shops["healthy"][0].tenant
    names = {
        stores.node_for(str(tenant.pk), key=f"idem:{{t:{tenant.pk}:{b}}}:x").name for b in range(16)
    }
    masters = {
        f"cluster:{client.get_node_from_key(f'{{t:{tenant.pk}:{b}}}').name}" for b in range(16)
    }
    client.close()
    assert names == masters and len(names) >= 2
