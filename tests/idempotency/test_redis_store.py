"""RedisIdempotencyStore and its Lua scripts, against real Redis servers."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from idempotency.core.outcomes import ClaimResult, Outcome, StoredResponse
from idempotency.stores.redis_store import (
    RedisIdempotencyStore,
    new_owner_token,
    pack_reply,
    unpack_reply,
)
from tests.idempotency.conftest import RedisServer

FP1, FP2 = "a" * 64, "b" * 64
BINARY_BODY = bytes(range(256)) * 2
RESPONSE = StoredResponse(
    status=201,
    headers=(("Content-Type", "application/octet-stream"), ("Location", "/api/v1/orders/ü/")),
    body=BINARY_BODY,
)
LEASE_MS = 5_000
TTL_MS = 72 * 3600 * 1000


def claim(
    store: RedisIdempotencyStore,
    key: str,
    *,
    fp: str = FP1,
    owner: str = "owner-1",
    lease_ms: int = LEASE_MS,
    field_hashes: dict[str, str] | None = None,
) -> ClaimResult:
    return store.claim(
        key=key,
        fingerprints={1: fp},
        current_version=1,
        owner=owner,
        lease_ms=lease_ms,
        field_hashes=field_hashes,
    )


# --- StoredResponse serialisation -------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    status=st.integers(100, 599),
    headers=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=5),
    body=st.binary(max_size=300),
)
def test_stored_response_round_trip_is_exact(
    status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    response = StoredResponse(status=status, headers=tuple(headers), body=body)
    assert StoredResponse.from_bytes(response.to_bytes()) == response


@pytest.mark.parametrize(
    "raw", [b"", b"SR\x01", b"XX\x01\x00\x00\x00\x02{}", b"SR\x01\x00\x00\x00\xff{}"]
)
def test_stored_response_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(ValueError):
        StoredResponse.from_bytes(raw)


@settings(max_examples=50, deadline=None)
@given(body=st.binary(max_size=3000) | st.text(max_size=1500).map(str.encode))
def test_a_packed_reply_reads_back_exactly_and_is_never_larger(body: bytes) -> None:
    headers = (("Content-Type", "application/json"),)
    response = StoredResponse(status=201, headers=headers, body=body)
    packed = pack_reply(response)
    assert unpack_reply(packed) == response
    assert len(packed) <= len(response.to_bytes())


def test_a_json_reply_is_kept_compressed_and_an_uncompressed_one_still_reads() -> None:
    body = b'{"id":"193754959213148520","lines":[{"dish_name":"Pizza","unit_price":"9.50"}],' * 8
    response = StoredResponse(status=201, headers=(("Location", "/api/v1/orders/1/"),), body=body)
    packed = pack_reply(response)
    assert packed.startswith(b"SZ\x01") and len(packed) < len(response.to_bytes()) / 2
    assert unpack_reply(response.to_bytes()) == response  # written before compression existed
    with pytest.raises(ValueError):
        unpack_reply(b"SZ\x01not zlib")


def test_outcome_values_are_what_audits_show() -> None:
    assert Outcome.MISMATCH == "REUSED"
    assert [o.value for o in Outcome] == ["MISS", "HIT", "IN_PROGRESS", "REUSED"]


# --- claim / finish / release -----------------------------------------------------------


def test_claim_miss_then_in_progress(store: RedisIdempotencyStore, key_prefix: str) -> None:
    key = key_prefix + "k"
    assert claim(store, key).outcome is Outcome.MISS

    second = claim(store, key, owner="owner-2")

    assert second.outcome is Outcome.IN_PROGRESS
    assert second.retry_after_ms is not None
    assert 0 < second.retry_after_ms <= LEASE_MS


def test_claim_with_other_fingerprint_is_reused(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    hashes = {"items": "0123456789abcdef", "total": "fedcba9876543210"}
    claim(store, key, field_hashes=hashes)

    result = claim(store, key, fp=FP2, owner="owner-2")

    assert result.outcome is Outcome.MISMATCH
    assert result.stored_fingerprint == FP1
    assert result.stored_field_hashes == hashes
    assert result.fingerprint_version == 1


def test_reused_is_reported_after_finish_too(store: RedisIdempotencyStore, key_prefix: str) -> None:
    key = key_prefix + "k"
    claim(store, key)
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)

    result = claim(store, key, fp=FP2)

    assert result.outcome is Outcome.MISMATCH
    assert result.stored_field_hashes is None


def test_finish_leaves_the_owner_and_the_field_hashes_to_the_record(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    """A finished entry keeps what a HIT and a REUSED need from Redis; the field hashes, only
    read to name the differing fields of a REUSED, are the committed record's from then on."""
    key = key_prefix + "k"
    claim(store, key, field_hashes={"items": "0123456789abcdef"})
    assert store.client.hexists(key, "fh") and store.client.hexists(key, "own")
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)
    assert sorted(store.client.hkeys(key)) == [b"fp", b"fpv", b"loc", b"res", b"st"]


def test_finish_by_owner_then_hit_replays_exact_bytes(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)

    assert store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS) is True
    result = claim(store, key, owner="owner-2")

    assert result.outcome is Outcome.HIT
    assert result.response == RESPONSE
    assert result.response is not None and result.response.body == BINARY_BODY
    assert result.stored_fingerprint == FP1
    assert result.fingerprint_version == 1


def test_finish_sets_the_long_ttl(
    store: RedisIdempotencyStore, redis_client: redis.Redis, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)

    assert TTL_MS - 2_000 < redis_client.pttl(key) <= TTL_MS
    assert redis_client.hget(key, "own") is None


def test_finish_by_non_owner_is_refused_and_changes_nothing(
    store: RedisIdempotencyStore, redis_client: redis.Redis, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)
    before = redis_client.hgetall(key)

    assert store.finish(key=key, owner="intruder", response=RESPONSE, ttl_ms=TTL_MS) is False

    assert redis_client.hgetall(key) == before
    assert redis_client.pttl(key) <= LEASE_MS
    assert claim(store, key, owner="owner-2").outcome is Outcome.IN_PROGRESS


def test_finish_after_the_lease_was_lost_is_refused(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key, lease_ms=50)
    time.sleep(0.1)
    assert claim(store, key, owner="owner-2").outcome is Outcome.MISS

    assert store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS) is False
    assert store.finish(key=key, owner="owner-2", response=RESPONSE, ttl_ms=TTL_MS) is True


def test_release_by_non_owner_does_nothing_by_owner_deletes(
    store: RedisIdempotencyStore, redis_client: redis.Redis, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)

    assert store.release(key=key, owner="intruder") is False
    assert redis_client.exists(key) == 1
    assert store.release(key=key, owner="owner-1") is True
    assert redis_client.exists(key) == 0
    assert claim(store, key, owner="owner-2").outcome is Outcome.MISS


def test_release_cannot_delete_a_finished_result(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)

    assert store.release(key=key, owner="owner-1") is False
    assert claim(store, key).outcome is Outcome.HIT


def test_lease_expiry_frees_the_key(store: RedisIdempotencyStore, key_prefix: str) -> None:
    key = key_prefix + "k"
    claim(store, key, lease_ms=100)
    time.sleep(0.15)

    assert claim(store, key, owner="owner-2").outcome is Outcome.MISS


# --- purge ----------------------------------------------------------------------------------


def test_purge_deletes_and_announces(
    store: RedisIdempotencyStore, make_client, key_prefix: str
) -> None:
    key = key_prefix + "k"
    listener = make_client().pubsub(ignore_subscribe_messages=True)
    listener.subscribe(store.channel)
    claim(store, key)
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)

    store.purge(key=key)

    assert claim(store, key).outcome is Outcome.MISS
    message = _next_message(listener)
    assert message is not None and message["data"] == key.encode()
    listener.close()


def _next_message(pubsub: redis.client.PubSub, timeout_s: float = 2.0) -> dict | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            return message
    return None


# --- fingerprint versions -----------------------------------------------------------------


def test_entry_stored_under_an_older_version_is_compared_under_that_version(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)  # an old process: version 1 only
    store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)

    def claim_v2(fingerprints: dict[int, str]) -> ClaimResult:
        return store.claim(
            key=key, fingerprints=fingerprints, current_version=2, owner="new", lease_ms=LEASE_MS
        )

    hit = claim_v2({1: FP1, 2: FP2})
    assert hit.outcome is Outcome.HIT
    assert hit.fingerprint_version == 1
    assert claim_v2({1: "c" * 64, 2: FP2}).outcome is Outcome.MISMATCH  # really different
    assert claim_v2({2: FP2}).outcome is Outcome.MISMATCH  # cannot compare: say mismatch


def test_claim_validates_its_arguments(store: RedisIdempotencyStore, key_prefix: str) -> None:
    key = key_prefix + "k"
    with pytest.raises(ValueError, match="current_version"):
        store.claim(key=key, fingerprints={1: FP1}, current_version=2, owner="o", lease_ms=1)
    with pytest.raises(ValueError, match="lease_ms"):
        claim(store, key, lease_ms=0)
    with pytest.raises(ValueError, match="owner"):
        claim(store, key, owner="")
    with pytest.raises(ValueError, match="','"):
        claim(store, key, fp="a,b")


def test_a_decoding_client_is_refused(make_client) -> None:
    with pytest.raises(ValueError, match="decode"):
        RedisIdempotencyStore(make_client(decode_responses=True))


# --- concurrency and recovery -------------------------------------------------------------


def test_concurrent_claims_have_exactly_one_winner(make_client, key_prefix: str) -> None:
    """32 threads, each with its own connection, claim one key at the same moment."""
    key, threads_n = key_prefix + "race", 32
    stores = [
        RedisIdempotencyStore(make_client(single_connection_client=True)) for _ in range(threads_n)
    ]
    for s in stores:  # connect (and load the script) before the race starts
        s.release(key=key, owner="nobody")
    barrier = threading.Barrier(threads_n)
    results: list[Outcome] = []
    lock = threading.Lock()

    def run(s: RedisIdempotencyStore) -> None:
        owner = new_owner_token()
        barrier.wait()
        outcome = claim(s, key, owner=owner).outcome
        with lock:
            results.append(outcome)

    workers = [threading.Thread(target=run, args=(s,)) for s in stores]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)

    assert len(results) == threads_n
    assert results.count(Outcome.MISS) == 1
    assert results.count(Outcome.IN_PROGRESS) == threads_n - 1


def test_scripts_are_reloaded_after_script_flush(private_redis: RedisServer) -> None:
    """NOSCRIPT (failover, restart, SCRIPT FLUSH) costs a reload, never a failed request."""
    client = redis.Redis.from_url(private_redis.url)
    store = RedisIdempotencyStore(client)
    assert claim(store, "idem:{t:1}:a").outcome is Outcome.MISS
    client.script_flush()
    assert client.script_exists(store.script_shas["claim"]) == [False]

    assert claim(store, "idem:{t:1}:a", owner="owner-2").outcome is Outcome.IN_PROGRESS
    assert store.finish(key="idem:{t:1}:a", owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)
    assert claim(store, "idem:{t:1}:a").outcome is Outcome.HIT
    client.close()


def test_works_on_redis_cluster(cluster_client: RedisCluster) -> None:
    """Single-key scripts are slot-safe; purge avoids PUBLISH in a cluster pipeline."""
    store = RedisIdempotencyStore(cluster_client)
    key = "idem:{t:7}:scope:k"

    assert claim(store, key).outcome is Outcome.MISS
    assert claim(store, key, fp=FP2).outcome is Outcome.MISMATCH
    assert store.finish(key=key, owner="owner-1", response=RESPONSE, ttl_ms=TTL_MS)
    assert claim(store, key).response == RESPONSE
    cluster_client.script_flush()
    assert claim(store, key).outcome is Outcome.HIT
    store.purge(key=key)
    assert not cluster_client.exists(key)
    assert store.release(key=key, owner="owner-1") is False


def test_finish_keeps_the_location_a_replays_audit_names(
    store: RedisIdempotencyStore, key_prefix: str
) -> None:
    key = key_prefix + "k"
    claim(store, key)
    located = StoredResponse(status=201, headers=(("Location", "/api/v1/orders/7/"),), body=b"{}")
    assert store.finish(key=key, owner="owner-1", response=located, ttl_ms=TTL_MS)
    assert store.client.hget(key, "loc") == b"/api/v1/orders/7/"
    claim(store, key + "-2")
    bare = StoredResponse(200)
    assert store.finish(key=key + "-2", owner="owner-1", response=bare, ttl_ms=TTL_MS)
    assert store.client.hget(key + "-2", "loc") == b""  # known to have none
