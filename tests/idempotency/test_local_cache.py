"""LocalResultCache and InvalidationListener, with real Redis pub/sub."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from idempotency.core.outcomes import Outcome, StoredResponse
from idempotency.stores.local_cache import InvalidationListener, LocalResultCache, entry_bytes
from idempotency.stores.redis_store import RedisIdempotencyStore
from tests.idempotency.conftest import RedisServer

RESPONSE = StoredResponse(status=201, headers=(("Content-Type", "application/json"),), body=b"{}")


class FakeClock:
    """Monotonic time that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def put(cache: LocalResultCache, key: str, *, fp: str = "fp1", ttl_s: float | None = None) -> None:
    cache.put(key, fingerprint=fp, fingerprint_version=1, response=RESPONSE, ttl_s=ttl_s)


def wait_until(condition: Callable[[], bool], timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def listeners() -> Iterator[list[InvalidationListener]]:
    """Listeners a test starts; all are stopped afterwards."""
    started: list[InvalidationListener] = []
    yield started
    for listener in started:
        listener.stop()


def start_listener(
    listeners: list[InvalidationListener],
    client: redis.Redis,
    cache: LocalResultCache,
    channel: str,
    **kwargs: float,
) -> InvalidationListener:
    listener = InvalidationListener(client, cache, channel=channel, **kwargs)
    listeners.append(listener)
    listener.start()
    assert listener.wait_subscribed(2.0)
    return listener


# --- the cache alone ----------------------------------------------------------------------


def test_put_get_invalidate_clear() -> None:
    cache = LocalResultCache()
    put(cache, "a")
    put(cache, "b")

    entry = cache.get("a")
    assert entry is not None and entry.response == RESPONSE and entry.fingerprint == "fp1"
    assert cache.get("missing") is None
    assert cache.invalidate("a") is True
    assert cache.invalidate("a") is False
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0


def test_lru_bound_evicts_the_least_recently_used() -> None:
    cache = LocalResultCache(max_entries=3)
    for key in "abc":
        put(cache, key)
    cache.get("a")  # now b is the least recently used

    put(cache, "d")

    assert len(cache) == 3
    assert cache.get("b") is None
    assert all(cache.get(key) is not None for key in "acd")


def sized(body_bytes: int) -> StoredResponse:
    return StoredResponse(status=400, body=b"x" * body_bytes)


def test_byte_budget_evicts_the_least_recently_used() -> None:
    one = entry_bytes("k0", sized(10_000))
    cache = LocalResultCache(max_entries=100, max_bytes=3 * one)
    for i in range(3):
        cache.put(f"k{i}", fingerprint="fp", fingerprint_version=1, response=sized(10_000))
    assert cache.bytes_used == 3 * one
    assert cache.get("k0") is not None  # k0 is now the most recently used

    cache.put("k3", fingerprint="fp", fingerprint_version=1, response=sized(10_000))

    assert cache.get("k1") is None
    assert [cache.get(k) is not None for k in ("k0", "k2", "k3")] == [True, True, True]
    assert cache.bytes_used == 3 * one


def test_an_entry_larger_than_the_budget_is_not_cached() -> None:
    cache = LocalResultCache(max_bytes=50_000)
    put(cache, "small")

    cache.put("huge", fingerprint="fp", fingerprint_version=1, response=sized(60_000))

    assert cache.get("huge") is None and cache.get("small") is not None


def test_replacing_invalidating_and_clearing_give_the_bytes_back() -> None:
    cache = LocalResultCache(max_bytes=1_000_000)
    cache.put("a", fingerprint="fp", fingerprint_version=1, response=sized(5_000))
    cache.put("a", fingerprint="fp", fingerprint_version=1, response=sized(1_000))
    assert cache.bytes_used == entry_bytes("a", sized(1_000))
    put(cache, "b")
    cache.invalidate("a")
    assert cache.bytes_used == entry_bytes("b", RESPONSE)
    cache.clear()
    assert cache.bytes_used == 0 and len(cache) == 0


def test_a_process_cache_holds_at_most_64_mib_of_replies_by_default() -> None:
    from idempotency.stores import nodes

    cache = nodes.local_cache()
    for i in range(1_500):  # 1,500 replies of 64 KiB: 94 MiB offered
        cache.put(f"r{i}", fingerprint="fp", fingerprint_version=1, response=sized(64 * 1024))

    assert cache.bytes_used <= 64 * 1024 * 1024
    assert 0 < len(cache) < 1_500


def test_entries_expire_after_their_ttl() -> None:
    clock = FakeClock()
    cache = LocalResultCache(ttl_s=60, clock=clock)
    put(cache, "long")
    put(cache, "short", ttl_s=5)
    put(cache, "capped", ttl_s=3_600)  # never beyond the cache's own TTL

    clock.now += 5
    assert cache.get("short") is None
    assert cache.get("long") is not None
    clock.now += 55
    assert cache.get("long") is None
    assert len(cache) == 0


def test_lookup_applies_the_fingerprint_version_rule() -> None:
    cache = LocalResultCache()
    put(cache, "k", fp="fp1")

    hit = cache.lookup("k", fingerprints={1: "fp1", 2: "new"})
    assert hit is not None and hit.outcome is Outcome.HIT and hit.response == RESPONSE
    other = cache.lookup("k", fingerprints={1: "fp-other"})
    assert other is not None and other.outcome is Outcome.MISMATCH
    unknown = cache.lookup("k", fingerprints={2: "new"})
    assert unknown is not None and unknown.outcome is Outcome.MISMATCH
    assert cache.lookup("absent", fingerprints={1: "fp1"}) is None


def test_a_result_read_before_a_key_was_invalidated_is_not_kept() -> None:
    """A request takes a mark before it reads or stores its result: a key invalidated since
    (an erasure's announcement that came first) keeps its result out of the cache, where it
    would have been replayed for the entry's TTL; with no invalidation since, it is kept."""
    cache = LocalResultCache()
    mark = cache.mark()
    cache.invalidate("k")
    cache.put(
        "k", fingerprint="fp1", fingerprint_version=1, response=RESPONSE, unless_dropped_since=mark
    )
    assert cache.get("k") is None
    cache.put(
        "k",
        fingerprint="fp1",
        fingerprint_version=1,
        response=RESPONSE,
        unless_dropped_since=cache.mark(),
    )
    assert cache.get("k") is not None


def test_concurrent_use_keeps_the_bound() -> None:
    cache = LocalResultCache(max_entries=50)

    def churn(worker: int) -> None:
        for i in range(500):
            put(cache, f"{worker}:{i % 80}")
            cache.get(f"{worker}:{(i * 7) % 80}")
            if i % 13 == 0:
                cache.invalidate(f"{worker}:{i % 80}")

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(cache) <= 50


# --- invalidation over pub/sub ------------------------------------------------------------


def test_purge_reaches_the_cache_of_another_process(
    make_client, key_prefix: str, channel: str, listeners: list[InvalidationListener]
) -> None:
    """Two 'processes' (own clients, caches and listeners); a purge from one empties both."""
    key = key_prefix + "k"
    caches = [LocalResultCache(), LocalResultCache()]
    for cache in caches:
        start_listener(listeners, make_client(), cache, channel)
        put(cache, key)
        put(cache, key_prefix + "other")
    store = RedisIdempotencyStore(make_client(), channel=channel)

    store.purge(key=key)

    assert wait_until(lambda: all(cache.get(key) is None for cache in caches))
    assert all(cache.get(key_prefix + "other") is not None for cache in caches)


def test_listener_clears_the_cache_after_its_connection_is_killed(
    private_redis: RedisServer, listeners: list[InvalidationListener]
) -> None:
    """Invalidations sent while the connection was down are lost: start from empty."""
    client = redis.Redis.from_url(private_redis.url)
    cache = LocalResultCache()
    listener = start_listener(listeners, client, cache, "idem:invalidate")
    put(cache, "k")

    killed = client.client_kill_filter(_type="pubsub")

    assert killed >= 1
    assert listener.wait_subscribed(2.0, more_than=1)
    assert len(cache) == 0
    put(cache, "k2")  # and it still applies invalidations afterwards
    client.publish("idem:invalidate", "k2")
    assert wait_until(lambda: cache.get("k2") is None)
    client.close()


def test_an_echo_listener_stops_hearing_while_publish_is_held(
    private_redis: RedisServer,
    listeners: list[InvalidationListener],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``CLIENT PAUSE WRITE`` holds every PUBLISH (announcements are lost) while a subscriber's
    PING is still answered: a listener that checks itself with a PUBLISH (``echo``) stops
    hearing, starts over from an empty cache once it subscribes again, and logs the outage's
    first failure with a traceback, the others in a line (it subscribes each time, but no echo
    comes back)."""
    client = redis.Redis.from_url(private_redis.url, socket_timeout=0.5)
    cache = LocalResultCache()
    listener = start_listener(
        listeners, client, cache, "idem:invalidate", ping_interval_s=0.1, echo=True
    )
    assert wait_until(lambda: listener.heard_within(0.3))
    put(cache, "k")
    subscribed = listener.subscriptions

    with caplog.at_level(logging.WARNING, logger="idempotency.stores.local_cache"):
        client.client_pause(4000, all=False)
        heard = [listener.heard_within(0.3) for _ in iter_until(time.monotonic() + 3.5)]

    assert not all(heard)
    assert listener.wait_subscribed(5.0, more_than=subscribed)
    assert cache.get("k") is None  # cleared: an announcement may have been lost meanwhile
    assert wait_until(lambda: listener.heard_within(0.3), timeout_s=10.0)
    failures = [r for r in caplog.records if "listener" in r.getMessage()]
    assert len(failures) >= 2
    assert [bool(r.exc_info) for r in failures] == [True] + [False] * (len(failures) - 1)
    client.close()


def iter_until(deadline: float) -> Iterator[None]:
    """Yield every 20 ms until ``deadline`` (monotonic)."""
    while time.monotonic() < deadline:
        yield
        time.sleep(0.02)


def test_listener_reconnects_with_backoff_after_the_server_restarts(
    restartable_redis: RedisServer, listeners: list[InvalidationListener]
) -> None:
    client = redis.Redis.from_url(restartable_redis.url)
    cache = LocalResultCache()
    listener = start_listener(listeners, client, cache, "idem:invalidate")

    restartable_redis.stop()
    put(cache, "stale")  # e.g. filled while Redis was away
    time.sleep(0.3)  # several failed reconnection attempts
    assert listener.is_running
    restartable_redis.start()

    assert listener.wait_subscribed(5.0, more_than=1)
    assert len(cache) == 0
    client.close()


def test_an_outage_logs_one_traceback_then_a_line_per_attempt(
    restartable_redis: RedisServer,
    listeners: list[InvalidationListener],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # every process of a site has a listener: Redis down made each log a traceback per attempt
    client = redis.Redis.from_url(restartable_redis.url)
    listener = start_listener(
        listeners, client, LocalResultCache(), "idem:invalidate", backoff_max_s=0.05
    )
    with caplog.at_level(logging.WARNING, logger="idempotency.stores.local_cache"):
        restartable_redis.stop()
        assert wait_until(lambda: len(caplog.records) >= 4, timeout_s=30)
        restartable_redis.start()
        assert listener.wait_subscribed(10.0, more_than=1)
    failures = [r for r in caplog.records if "listener" in r.getMessage()]
    assert len(failures) >= 4
    assert [bool(r.exc_info) for r in failures][:3] == [True, False, False]
    client.close()


def test_stop_and_ensure_running(
    make_client, channel: str, listeners: list[InvalidationListener]
) -> None:
    listener = start_listener(listeners, make_client(), LocalResultCache(), channel)

    listener.stop()
    assert not listener.is_running
    listener.ensure_running()  # an explicit stop is respected
    assert not listener.is_running
    listener.start()
    assert listener.is_running


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_restarts_its_own_listener(
    make_client, channel: str, listeners: list[InvalidationListener]
) -> None:
    """After fork the child has no thread and a fresh cache; ensure_running fixes that."""
    cache = LocalResultCache()
    listener = start_listener(listeners, make_client(), cache, channel)
    put(cache, "k")

    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 1
        try:
            if not listener.is_running and len(cache) == 0:
                listener.ensure_running()
                if listener.wait_subscribed(2.0) and listener.is_running:
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert listener.is_running  # the parent's thread is untouched
    assert cache.get("k") is not None
