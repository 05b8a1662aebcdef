"""A Redis Cluster with every master gone: orders go on from the database, nothing answers 500.

redis-py reports a cluster it cannot reach at all with ``RedisClusterException``, which is not a
``RedisError``: every place that talks to Redis must treat it as the outage it is. This test
stops all three masters of a cluster of its own, then places, replays and pays orders and
revokes a diner (whose announcement goes to the cluster too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from redis.cluster import RedisCluster

from idempotency.stores import nodes as stores
from ordering.models import Order
from tenants.diner_sessions import revoke_diner
from tenants.models import Tenant
from tests.conftest import api_for, menu_for, use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.support.redis_nodes import RedisNode, start_cluster, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster() -> Iterator[list[RedisNode]]:
    nodes = start_cluster(3)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.remove()


def test_with_every_master_gone_orders_replay_and_revocations_go_on(
    settings: Any, cluster: list[RedisNode], make_tenant: Callable[..., Tenant]
) -> None:
    use_topology(settings, cluster=cluster[0].url)
    tenant = make_tenant()
    api, menu = api_for(tenant, diner="leaving"), menu_for(tenant, 100)
    before = post_order(api, menu, key="before-the-outage")
    assert before.status_code == 201 and before["X-Idempotent-Result"] == "MISS"

    for node in cluster:
        node.remove()
    stores.local_cache().clear()  # the replay must come from the database, not this process

    replay = post_order(api, menu, key="before-the-outage")
    assert replay.status_code == 201, replay.content
    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == before.content
    during = post_order(api, menu, key="during-the-outage")
    assert during.status_code == 201, during.content
    assert post_order(api, menu, key="during-the-outage").content == during.content
    assert Order.objects.for_tenant(tenant).count() == 2
    assert revoke_diner(tenant=tenant, diner_id="leaving") == 1
    assert post_order(api, menu, key="after-the-revocation").status_code == 401


def test_a_process_that_starts_while_the_cluster_is_gone_places_orders_from_the_database(
    settings: Any, cluster: list[RedisNode], make_tenant: Callable[..., Tenant]
) -> None:
    # A gunicorn worker started during the outage (a replacement for a crashed one, a deploy)
    # makes its cluster client then: its first request must not be the 500 of a client that
    # could not be built, and once a node answers again the same client is used.
    use_topology(settings, cluster=cluster[0].url)
    for node in cluster:
        node.stop()
    tenant = make_tenant()
    api, menu = api_for(tenant, diner="starting"), menu_for(tenant, 100)

    first = post_order(api, menu, key="placed-while-gone")
    assert first.status_code == 201, first.content
    replay = post_order(api, menu, key="placed-while-gone")
    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == first.content
    assert Order.objects.for_tenant(tenant).count() == 1
    ready = Client().get("/readyz")  # a probe reports the cluster, it does not fail with it
    assert ready.status_code == 200 and ready.json()["redis"] == ["unavailable"]

    for node in cluster:
        node.start()
    wait_until(
        lambda: all(n.client().cluster("info")["cluster_state"] == "ok" for n in cluster),
        what="the cluster back",
    )
    stores.local_cache().clear()
    assert post_order(api, menu, key="placed-while-gone").content == first.content
    after = post_order(api, menu, key="placed-after-the-outage")
    assert after.status_code == 201, after.content
    assert Order.objects.for_tenant(tenant).count() == 2


def test_an_order_during_clusterdown_sends_each_command_at_most_twice(
    settings: Any,
    cluster: list[RedisNode],
    make_tenant: Callable[..., Tenant],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One master lost and no replica to promote: the other masters answer every command
    # CLUSTERDOWN, and redis-py pauses 0.25 s and reads the slot map again after each. Its
    # default three retries made every call take about 3 s, an order about 6 s, until each
    # process's breaker opened; one retry, at once, lets the order fall back to the database.
    use_topology(settings, cluster=cluster[0].url)
    tenant = make_tenant()
    api, menu = api_for(tenant, diner="hurried"), menu_for(tenant, 100)
    assert post_order(api, menu, key="before").status_code == 201
    cluster[1].stop()
    wait_until(
        lambda: cluster[0].client().cluster("info")["cluster_state"] == "fail",
        what="the cluster's failure",
    )
    commands, attempts = (
        _counted(monkeypatch, "_internal_execute_command"),
        _counted(monkeypatch, "_execute_command"),
    )

    during = post_order(api, menu, key="during-clusterdown")

    assert during.status_code == 201, during.content
    assert commands and len(attempts) <= 2 * len(commands), (len(commands), len(attempts))
    assert post_order(api, menu, key="during-clusterdown").content == during.content


def _counted(monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """Each call of ``RedisCluster.<method>`` from now on, by its command's name."""
    calls: list[str] = []
    original = getattr(RedisCluster, method)

    def counting(self: RedisCluster, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[0] if method == "_internal_execute_command" else args[1]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RedisCluster, method, counting)
    return calls
