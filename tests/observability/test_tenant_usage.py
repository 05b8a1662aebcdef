"""/metrics shows what each tenant keeps (``idempotency/stores/usage.py``): records, cached;
Redis keys, from a census that reads a bounded number of keys per scrape."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from idempotency.stores import nodes
from idempotency.stores.nodes import node_name
from idempotency.stores.usage import usage
from tenants.redis_routing import all_clients
from tests.conftest import use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.observability.test_metrics import TOKEN, samples
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_usage(settings: Any) -> Iterator[None]:
    settings.METRICS_TOKEN = TOKEN
    usage.reset()
    yield
    usage.reset()


@pytest.fixture
def own_node(settings: Any) -> Iterator[RedisNode]:
    """A Redis of the test's own, so its keyspace and command counts are the test's alone."""
    node = RedisNode().start()
    use_topology(settings, shards=[node.url])
    yield node
    node.remove()


def scrape(client: Any) -> dict[tuple[str, frozenset], float]:
    response = client.get("/metrics", secure=True, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return samples(response.content.decode())


def per_tenant(metrics: dict[tuple[str, frozenset], float], name: str) -> dict[str, float]:
    return {dict(labels)["tenant"]: v for (n, labels), v in metrics.items() if n == name}


def scan_calls(node: RedisNode) -> int:
    return int(node.client().info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def test_records_per_tenant_are_counted_and_cached(
    client: Any, settings: Any, api: Any, menu: Any, tenant: Any, make_tenant: Any
) -> None:
    from tests.conftest import api_for, menu_for

    other = make_tenant()
    for key in ("a", "b", "c"):
        post_order(api, menu, key=key)
    post_order(api_for(other, diner="d"), menu_for(other), key="x")

    first = per_tenant(scrape(client), "idempotency_tenant_records")
    post_order(api, menu, key="d")
    cached = per_tenant(scrape(client), "idempotency_tenant_records")
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "USAGE_CACHE_SECONDS": 0}
    fresh = per_tenant(scrape(client), "idempotency_tenant_records")

    assert first == {str(tenant.pk): 3, str(other.pk): 1}
    assert cached == first  # within USAGE_CACHE_SECONDS the count is not taken again
    assert fresh == {str(tenant.pk): 4, str(other.pk): 1}


def test_the_key_census_reads_a_bounded_number_of_keys_per_scrape(
    client: Any, settings: Any, own_node: RedisNode
) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "USAGE_SCAN_KEYS": 2000}
    writer = redis.Redis.from_url(own_node.url)
    pipe = writer.pipeline(transaction=False)
    for i in range(5000):
        pipe.set(f"idem:{{t:41}}:scope:{i}", b"x")
    for i in range(30):
        pipe.set(f"idem:{{t:42:3}}:tok:{i}", b"x")
    pipe.set("rl:{t:42}:abc:60s", 1)
    pipe.set("celery-task-meta-1", b"not a tenant's")
    pipe.execute()

    scrapes, calls = [], []
    for _ in range(10):
        before = scan_calls(own_node)
        scrapes.append(per_tenant(scrape(client), "idempotency_tenant_redis_keys"))
        calls.append(scan_calls(own_node) - before)

    assert max(calls) <= 2  # 2,000 keys a scrape: two SCAN calls of 1,000, never the keyspace
    assert scrapes[0] == {}  # the first pass is not complete after one scrape
    assert scrapes[-1] == {"41": 5000, "42": 31}
    node_ages = [
        v for (n, _), v in scrape(client).items() if n == "idempotency_redis_key_census_age_seconds"
    ]
    assert len(node_ages) == 1 and node_ages[0] >= 0


def test_a_node_that_does_not_answer_leaves_the_scrape_answering(
    client: Any, settings: Any, own_node: RedisNode
) -> None:
    # given a node counted once, then gone (a slow node times out the same way)
    redis.Redis.from_url(own_node.url).set("idem:{t:43}:scope:k", b"x")
    assert per_tenant(scrape(client), "idempotency_tenant_redis_keys") == {"43": 1}
    own_node.stop()
    # when /metrics is scraped, then it answers 200 with the node's last complete pass
    assert per_tenant(scrape(client), "idempotency_tenant_redis_keys") == {"43": 1}


def test_a_census_completed_by_this_scrape_is_not_younger_than_zero(
    client: Any, settings: Any, own_node: RedisNode
) -> None:
    """The scrape read the clock before it advanced the census: a pass completed by that same
    scrape was exported with a negative age (a dashboard showing "-0.0005 s")."""
    redis.Redis.from_url(own_node.url).set("idem:{t:44}:scope:k", b"x")
    first = scrape(client)
    assert per_tenant(first, "idempotency_tenant_redis_keys") == {"44": 1}  # completed now
    ages = [v for (n, _), v in first.items() if n == "idempotency_redis_key_census_age_seconds"]
    assert len(ages) == 1 and ages[0] >= 0


def test_the_census_age_is_not_moved_by_a_step_of_the_wall_clock(
    client: Any, tenant: Any, monkeypatch: Any
) -> None:
    """A pass's age is counted on the process's own steady clock: the wall clock stepped back
    an hour (an NTP correction, a VM restored) exported an age of -3600 s, and stepped forward
    an age of an hour for a pass just completed (red: the wall clock was used)."""
    # given a census completed by a scrape, then its node left out of scrapes (its breaker
    # open), so the next scrape exports the same pass's age
    [redis_node] = all_clients()
    name = node_name(redis_node)
    scrape(client)
    node = nodes.node_for(str(tenant.pk))
    assert node is not None and node.name == name
    node.breaker._open(node.breaker._clock(), "an outage")
    try:
        # when the wall clock steps back an hour and /metrics is scraped again
        wall_clock = time.time
        monkeypatch.setattr(time, "time", lambda: wall_clock() - 3600)
        ages = scrape(client)
        # then the age is still the few seconds since the pass, not negative
        age = ages[("idempotency_redis_key_census_age_seconds", frozenset({("node", name)}))]
        assert 0 <= age < 60
    finally:
        nodes.reset()
