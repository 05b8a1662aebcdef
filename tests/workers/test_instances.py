"""Stale-lease recovery: leases of instances that stopped heartbeating are reclaimed, each by a
compare-owner-then-delete; live, unknown and recently renewed leases are left alone."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from idempotency.stores import instances
from idempotency.stores.redis_store import RedisIdempotencyStore, new_owner_token
from ordering.instances import reclaim_stale_leases
from ordering.models import WorkerLease
from ordering.worker_ids import KEY_PREFIX
from tests.conftest import use_topology
from tests.support.ports import free_port

pytestmark = pytest.mark.django_db

LEASE = settings.ORDER_ID_LEASE_SECONDS
DEAD = "deadhost:4242:aaaa1111"
ALSO_DEAD = "deadhost:4343:bbbb2222"
LIVE = "livehost:77:cccc3333"
REUSED_PID_OLD = "samehost:99:dddd4444"  # died; its pid now belongs to a live instance:
REUSED_PID_NEW = "samehost:99:eeee5555"
FP = {1: "f" * 64}


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.zrem(instances.REGISTRY_KEY, DEAD, ALSO_DEAD, LIVE, REUSED_PID_OLD, REUSED_PID_NEW)
    for key in client.scan_iter(match="idem:{t:stale-test}:*"):
        client.delete(key)
    for key in client.scan_iter(match=f"{KEY_PREFIX}*"):
        owner = client.get(key) or b""
        if owner.startswith((b"deadhost", b"livehost", b"samehost")):
            client.delete(key)
    client.close()


def register(client: redis.Redis, instance: str, *, silent_for: float) -> None:
    now = client.time()[0]
    client.zadd(instances.REGISTRY_KEY, {instance: now - silent_for})


def claim(client: redis.Redis, name: str, owner: str) -> str:
    key = f"idem:{{t:stale-test}}:{name}"
    RedisIdempotencyStore(client).claim(
        key=key, fingerprints=FP, current_version=1, owner=owner, lease_ms=30_000
    )
    return key


def free_worker_id(client: redis.Redis) -> Iterator[int]:
    return (n for n in range(127, -1, -1) if not client.exists(f"{KEY_PREFIX}{n}"))


def test_owner_tokens_carry_the_instance_id_and_it_heartbeats(client):
    token = new_owner_token()
    me = instances.instance_id()
    assert token.startswith(me + "/") and instances.instance_of_owner(token) == me
    instances.beat(me)
    census = instances.census(client)
    assert census is not None and census.silent_for(me) < 2
    assert me in census.alive(after=instances.dead_after_seconds())
    assert instances.instance_of_owner("legacy-token-without-instance") is None


def test_claims_of_dead_instances_are_released_and_others_left(client):
    register(client, DEAD, silent_for=100)
    register(client, LIVE, silent_for=1)
    dead_claim = claim(client, "a", f"{DEAD}/t1")
    live_claim = claim(client, "b", f"{LIVE}/t2")
    unknown_claim = claim(client, "c", "crashed-process-without-instance-id")
    finished = claim(client, "d", f"{DEAD}/t3")
    client.hset(finished, mapping={"st": "d", "res": b"x"})
    client.hdel(finished, "own")

    report = reclaim_stale_leases()

    # (other processes that died during the test run may add to the counts: assert on ours)
    assert report.claims_released >= 1
    assert not client.exists(dead_claim)
    assert client.hget(live_claim, "own") == f"{LIVE}/t2".encode()
    assert client.exists(unknown_claim) and client.hget(finished, "st") == b"d"


def test_a_claim_that_changed_hands_is_not_deleted():
    # compare-owner-then-delete: release.lua refuses an owner that no longer holds the key
    store = RedisIdempotencyStore(redis.Redis.from_url(settings.REDIS_URL))
    key = "idem:{t:stale-test}:handover"
    store.claim(key=key, fingerprints=FP, current_version=1, owner=f"{LIVE}/new", lease_ms=30_000)
    assert store.release(key=key, owner=f"{DEAD}/old") is False
    assert store.release(key=key, owner=f"{LIVE}/new") is True


def test_worker_id_leases_of_long_dead_instances_are_released(client):
    # given a dead instance's abandoned worker-id lease (not renewed for 2/3 of the lease)
    register(client, DEAD, silent_for=LEASE * 2)
    register(client, ALSO_DEAD, silent_for=LEASE * 2)
    register(client, LIVE, silent_for=1)
    register(client, REUSED_PID_OLD, silent_for=LEASE * 2)
    register(client, REUSED_PID_NEW, silent_for=1)
    ids = free_worker_id(client)
    abandoned, renewed, live, reused = next(ids), next(ids), next(ids), next(ids)
    client.set(f"{KEY_PREFIX}{abandoned}", "deadhost:4242:9f9f9f9f", ex=LEASE // 3 - 1)
    # a lease whose owner looks dead but that was renewed lately: never touched
    client.set(f"{KEY_PREFIX}{renewed}", "deadhost:4343:9e9e9e9e", ex=LEASE)
    client.set(f"{KEY_PREFIX}{live}", "livehost:77:9d9d9d9d", ex=LEASE // 3 - 1)
    client.set(f"{KEY_PREFIX}{reused}", "samehost:99:9c9c9c9c", ex=LEASE // 3 - 1)
    # and a database lease (Redis was down when it was taken) of the dead instance, not lapsed
    # yet but not renewed for 2/3 of the lease
    last_renewed = timezone.now() - timedelta(seconds=LEASE * 2 / 3 + 1)
    WorkerLease.objects.create(
        worker_id=abandoned,
        owner="deadhost:4242:9f9f9f9f",
        expires_at=last_renewed + timedelta(seconds=LEASE),
        heartbeat_at=last_renewed,
    )

    report = reclaim_stale_leases()

    assert report.worker_leases_released >= 2  # the Redis key and the database row
    assert not client.exists(f"{KEY_PREFIX}{abandoned}")
    assert not WorkerLease.objects.filter(worker_id=abandoned).exists()
    for kept in (renewed, live, reused):
        assert client.exists(f"{KEY_PREFIX}{kept}")
    # and the instances handled are forgotten; live ones stay registered
    census = instances.census(client)
    assert DEAD not in census.last_seen and LIVE in census.last_seen


def test_recently_dead_instances_lose_their_claims_but_keep_worker_ids_for_now(client):
    # silent longer than INSTANCE_DEAD_AFTER (15 s) but shorter than a worker id stays usable
    register(client, DEAD, silent_for=20)
    key = claim(client, "e", f"{DEAD}/t")
    worker_id = next(free_worker_id(client))
    client.set(f"{KEY_PREFIX}{worker_id}", "deadhost:4242:9f9f9f9f", ex=LEASE // 3 - 1)

    report = reclaim_stale_leases()

    assert report.claims_released >= 1
    assert not client.exists(key) and client.exists(f"{KEY_PREFIX}{worker_id}")
    assert DEAD in instances.census(client).last_seen  # kept until its worker ids are handled


def test_the_command_names_the_redis_node_that_did_not_answer_and_what_to_do(settings) -> None:
    """Run from cron while Redis was down, it stopped with redis-py's traceback
    (ConnectionError, Error 111) and said nothing of what to do."""
    use_topology(settings, shards=[f"redis://127.0.0.1:{free_port()}/0"])

    with pytest.raises(CommandError, match=r"a Redis node did not answer .*: run it again"):
        call_command("reclaim_stale_leases", stdout=io.StringIO())
