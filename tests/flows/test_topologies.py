"""The engine on real topologies: three standalone shard nodes, and a three-master cluster.

Claim, finish, replay and cross-process invalidation must work the same on both, each tenant's
keys must live where the router says, and every Lua call must touch one cluster slot.
"""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster

from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import nodes as stores
from idempotency.stores.local_cache import InvalidationListener, LocalResultCache
from ordering.models import Order
from tenants.redis_routing import alias_for_tenant
from tests.conftest import api_for, menu_for, use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = pytest.mark.django_db


def place_and_replay(tenant, key="k1"):
    api = api_for(tenant, diner="d1")
    menu = menu_for(tenant)
    first = post_order(api, menu, key=key)
    stores.local_cache().clear()  # make the replay go to Redis
    again = post_order(api, menu, key=key)
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    return first


def test_sharded_tenants_live_on_their_own_node(settings, shard_nodes, make_tenant):
    # given three standalone nodes and six tenants
    use_topology(settings, shards=[n.url for n in shard_nodes])
    for node in shard_nodes:
        node.client().flushall()
    tenants = [make_tenant() for _ in range(6)]
    # when each places an order and replays it
    for tenant in tenants:
        place_and_replay(tenant)
    # then each tenant's entry is on exactly the node the router picked, and nowhere else
    by_alias = {f"redis-{i}": node for i, node in enumerate(shard_nodes)}
    for tenant in tenants:
        home = by_alias[alias_for_tenant(str(tenant.pk))]
        for node in shard_nodes:
            keys = list(node.client().scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
            assert len(keys) == (1 if node is home else 0)
    assert len({alias_for_tenant(str(t.pk)) for t in tenants}) >= 2
    assert Order.all_tenants.count() == 6


def test_sharded_purge_invalidates_other_processes_caches(settings, shard_nodes, tenant):
    use_topology(settings, shards=[n.url for n in shard_nodes])
    place_and_replay(tenant, key="purge")
    home = shard_nodes[int(alias_for_tenant(str(tenant.pk)).split("-")[1])]
    # a second process's cache, listening on the tenant's node
    other_cache = LocalResultCache()
    listener = InvalidationListener(home.client(), other_cache, channel="idem:invalidate")
    listener.start()
    assert listener.wait_subscribed(DEADLINE_SECONDS)
    other_cache.put("probe", fingerprint="f", fingerprint_version=1, response=_stored())
    key = next(iter(stores.local_cache()._entries), None) or "probe"
    other_cache.put(key, fingerprint="f", fingerprint_version=1, response=_stored())
    purge_record(IdempotencyRecord.objects.get())
    wait_until(lambda: other_cache.get(key) is None, what="the other process's cache entry dropped")
    listener.stop()
    assert not list(home.client().scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))


def _stored():
    from idempotency.core.outcomes import StoredResponse

    return StoredResponse(status=201, body=b"x")


def test_cluster_claim_finish_replay(settings, cluster_nodes, make_tenant):
    use_topology(settings, cluster=cluster_nodes[0].url)
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    tenants = [make_tenant() for _ in range(4)]
    for tenant in tenants:
        place_and_replay(tenant)
    slots = set()
    for tenant in tenants:
        [key] = list(client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
        assert client.hget(key, "st") == b"d"
        slots.add(client.keyslot(key))
    assert len(slots) == len(tenants)
    # keys of several tenants are spread over more than one master
    masters = {client.get_node_from_key(f"idem:{{t:{t.pk}}}:x").port for t in tenants}
    assert len(masters) >= 2 or len(tenants) < 3
    client.close()


def test_hot_tenant_buckets_on_the_cluster(settings, cluster_nodes, tenant):
    # given a hot tenant split into 8 sub-buckets
    use_topology(settings, cluster=cluster_nodes[0].url)
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HOT_TENANT_BUCKETS": {str(tenant.pk): 8}}
    api, menu = api_for(tenant, diner="d1"), menu_for(tenant)
    for i in range(24):
        assert post_order(api, menu, key=f"hot-{i}", quantity=1).status_code == 201
        stores.local_cache().clear()
        assert post_order(api, menu, key=f"hot-{i}", quantity=1)["X-Idempotent-Result"] == "HIT"
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    keys = list(client.scan_iter(match=f"idem:{{t:{tenant.pk}:*"))
    client.close()
    # then the tenant's keys use several slots, each Lua call still one key (one slot)
    assert len(keys) == 24
    assert len({RedisCluster.keyslot(client, k) for k in keys}) > 1


def test_cluster_refuses_cross_slot_scripts(cluster_nodes):
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    script = client.register_script("return redis.call('GET', KEYS[1])")
    with pytest.raises(redis.exceptions.RedisClusterException):
        script(keys=["idem:{t:1}:a", "idem:{t:2}:b"])
    client.close()


def test_cluster_purge_invalidates_other_processes_caches(settings, cluster_nodes, tenant):
    # given a finished request on the cluster and a second process's cache listening there
    use_topology(settings, cluster=cluster_nodes[0].url)
    place_and_replay(tenant, key="purge-on-cluster")
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port)
    other_cache = LocalResultCache()
    listener = InvalidationListener(client, other_cache, channel="idem:invalidate")
    listener.start()
    assert listener.wait_subscribed(DEADLINE_SECONDS)
    [key] = [k.decode() for k in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")]
    other_cache.put(key, fingerprint="f", fingerprint_version=1, response=_stored())
    # when staff purge the record
    purge_record(IdempotencyRecord.objects.get())
    # then the other process drops it, and the cluster forgot the key
    wait_until(lambda: other_cache.get(key) is None, what="the other process's cache entry dropped")
    listener.stop()
    assert client.exists(key) == 0
    client.close()
