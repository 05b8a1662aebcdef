"""The order ID generator: layout, uniqueness across real processes, sequence and clock handling.

Worker ids are leased from the real Redis under a per-test key prefix (only those keys are
deleted afterwards). Clock tests inject a fake wall clock whose ``sleep`` advances it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import redis
from django.conf import settings
from prometheus_client import REGISTRY

from ordering import order_ids
from ordering.order_ids import (
    EPOCH,
    ClockMovedBackwards,
    OrderIdGenerator,
    OrderIdParts,
    decode_order_id,
    dish_bucket,
    next_order_id,
)
from ordering.worker_ids import RedisLeaseStore, WorkerLeaseHandle, lease_worker_id

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LeaseFactory = Callable[[], WorkerLeaseHandle]


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    if not settings.REDIS_URL:
        pytest.fail("these tests need the real Redis: set REDIS_URL (make test does)")
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def key_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A worker-lease key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:orderid:worker:"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def lease(key_prefix: str) -> Iterator[LeaseFactory]:
    """Lease worker ids from Redis under ``key_prefix``; all are released after the test."""
    handles: list[WorkerLeaseHandle] = []

    def make() -> WorkerLeaseHandle:
        handle = lease_worker_id(stores=[RedisLeaseStore(key_prefix=key_prefix)], lease_seconds=30)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.release()


class FakeClock:
    """A wall clock that moves only when stepped or slept on.

    It counts whole microseconds, so even the tiniest sleep moves it forward.
    """

    def __init__(self, *, at: datetime) -> None:
        self.micros = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.micros / 1_000_000

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.micros += max(1, math.ceil(seconds * 1_000_000))

    def step(self, *, ms: float) -> None:
        self.micros += round(ms * 1000)


# 3.5 ms into a tick, so float rounding cannot put a reading into a neighbouring tick.
SOME_TICK = 123_456_789
MID_TICK = EPOCH + timedelta(milliseconds=SOME_TICK * 10 + 3.5)


def test_fields_round_trip(lease: LeaseFactory) -> None:
    handle = lease()
    clock = FakeClock(at=MID_TICK)
    generator = OrderIdGenerator(worker_lease=handle, clock=clock, sleep=clock.sleep)

    first = generator.next_id(shard=9, dish_bucket=dish_bucket(42))
    second = generator.next_id(shard=0, dish_bucket=4000)

    issued_at = EPOCH + timedelta(milliseconds=SOME_TICK * 10)
    assert decode_order_id(first) == OrderIdParts(
        issued_at=issued_at, shard=9, dish_bucket=165, worker_id=handle.worker_id, sequence=0
    )
    assert decode_order_id(second) == OrderIdParts(
        issued_at=issued_at, shard=0, dish_bucket=4000, worker_id=handle.worker_id, sequence=1
    )


def test_largest_fields_give_the_largest_positive_bigint(
    lease: LeaseFactory, key_prefix: str, redis_client: redis.Redis
) -> None:
    redis_client.mset({f"{key_prefix}{n}": "other" for n in range(127)})
    handle = lease()
    assert handle.worker_id == 127
    last_tick = (1 << 37) - 1
    clock = FakeClock(at=EPOCH + timedelta(milliseconds=last_tick * 10 + 3.5))
    generator = OrderIdGenerator(worker_lease=handle, clock=clock, sleep=clock.sleep)

    ids = [generator.next_id(shard=15, dish_bucket=4095) for _ in range(8)]

    assert all(0 < order_id < 1 << 63 for order_id in ids)
    assert ids[-1] == (1 << 63) - 1
    assert decode_order_id(ids[-1]) == OrderIdParts(
        issued_at=EPOCH + timedelta(milliseconds=last_tick * 10),
        shard=15,
        dish_bucket=4095,
        worker_id=127,
        sequence=7,
    )
    assert decode_order_id(ids[-1]).issued_at.year == 2069
    clock.step(ms=10)
    with pytest.raises(OverflowError):
        generator.next_id(shard=0, dish_bucket=0)


@pytest.mark.parametrize(
    ("shard", "bucket", "message"),
    [(-1, 0, "shard"), (16, 0, "shard"), (0, -1, "dish_bucket"), (0, 4096, "dish_bucket")],
)
def test_out_of_range_shard_or_bucket_is_refused(
    lease: LeaseFactory, shard: int, bucket: int, message: str
) -> None:
    generator = OrderIdGenerator(worker_lease=lease())
    with pytest.raises(ValueError, match=message):
        generator.next_id(shard=shard, dish_bucket=bucket)


@pytest.mark.parametrize("not_an_id", [-1, 1 << 63])
def test_decode_refuses_what_cannot_be_an_order_id(not_an_id: int) -> None:
    with pytest.raises(ValueError):
        decode_order_id(not_an_id)


def test_dish_bucket_is_stable_and_in_range() -> None:
    # Buckets are stored inside order IDs: these values must never change.
    assert [dish_bucket(d) for d in (1, 2, 42, 10**12)] == [788, 3662, 165, 2856]
    buckets = {dish_bucket(d) for d in range(20_000)}
    assert min(buckets) >= 0
    assert max(buckets) <= 4095
    assert len(buckets) > 3900  # spread over (nearly) all 4096


def test_one_lease_feeds_one_generator(lease: LeaseFactory) -> None:
    handle = lease()
    OrderIdGenerator(worker_lease=handle)
    with pytest.raises(ValueError, match="already feeds"):
        OrderIdGenerator(worker_lease=handle)


def test_used_up_tick_waits_for_the_next(lease: LeaseFactory) -> None:
    clock = FakeClock(at=MID_TICK)
    generator = OrderIdGenerator(worker_lease=lease(), clock=clock, sleep=clock.sleep)

    ids = [generator.next_id(shard=2, dish_bucket=2) for _ in range(9)]

    parts = [decode_order_id(order_id) for order_id in ids]
    assert [p.sequence for p in parts] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    assert {p.issued_at for p in parts[:8]} == {EPOCH + timedelta(milliseconds=SOME_TICK * 10)}
    assert parts[8].issued_at == EPOCH + timedelta(milliseconds=(SOME_TICK + 1) * 10)
    assert ids == sorted(set(ids))
    assert sum(clock.sleeps) == pytest.approx(0.0065, abs=1e-5)  # the rest of the tick


def backsteps() -> dict[str, float]:
    """``ordering_order_id_clock_backsteps_total`` by outcome, as /metrics exports it."""
    return {
        outcome: REGISTRY.get_sample_value(
            "ordering_order_id_clock_backsteps_total", {"outcome": outcome}
        )
        or 0.0
        for outcome in ("waited", "refused")
    }


def test_small_clock_step_back_is_waited_out(
    lease: LeaseFactory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(at=MID_TICK)
    generator = OrderIdGenerator(worker_lease=lease(), clock=clock, sleep=clock.sleep)
    before = generator.next_id(shard=2, dish_bucket=2)
    counted = backsteps()

    clock.step(ms=-50)
    after = generator.next_id(shard=2, dish_bucket=2)

    assert backsteps() == {"waited": counted["waited"] + 1, "refused": counted["refused"]}
    assert after > before
    assert decode_order_id(after).issued_at == EPOCH + timedelta(milliseconds=(SOME_TICK + 1) * 10)
    assert sum(clock.sleeps) == pytest.approx(0.0565, abs=1e-5)  # 50 ms + the rest of the tick
    assert "clock moved backwards by 50 ms" in caplog.text


def test_large_clock_step_back_is_refused_and_issues_nothing(
    lease: LeaseFactory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(at=MID_TICK)
    generator = OrderIdGenerator(worker_lease=lease(), clock=clock, sleep=clock.sleep)
    before = generator.next_id(shard=2, dish_bucket=2)
    counted = backsteps()

    clock.step(ms=-5000)
    with (
        caplog.at_level(logging.ERROR, logger="ordering.order_ids"),
        pytest.raises(ClockMovedBackwards, match="by 5000 ms"),
    ):
        generator.next_id(shard=2, dish_bucket=2)
    assert clock.sleeps == []
    assert backsteps() == {"waited": counted["waited"], "refused": counted["refused"] + 1}
    assert [r.levelname for r in caplog.records if r.name == "ordering.order_ids"] == ["ERROR"]

    clock.step(ms=5000)  # back where it was: the refused call used no sequence number
    after = generator.next_id(shard=2, dish_bucket=2)
    assert after == before + 1


def test_process_wide_generator_is_created_once_under_concurrent_first_use(
    monkeypatch: pytest.MonkeyPatch, key_prefix: str
) -> None:
    leased: list[WorkerLeaseHandle] = []

    def lease_for_test() -> WorkerLeaseHandle:
        handle = lease_worker_id(stores=[RedisLeaseStore(key_prefix=key_prefix)])
        leased.append(handle)
        return handle

    monkeypatch.setattr(order_ids, "_process_generator", None)
    monkeypatch.setattr(order_ids, "lease_worker_id", lease_for_test)
    start = threading.Barrier(8)
    issued: list[int] = []

    def issue() -> None:
        start.wait()
        issued.extend(next_order_id(shard=4, dish_bucket=4) for _ in range(10))

    threads = [threading.Thread(target=issue) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for handle in leased:
        handle.release()

    assert len(leased) == 1
    assert len(set(issued)) == 80
    assert {decode_order_id(i).worker_id for i in issued} == {leased[0].worker_id}


_CHILD = """
import json, sys
import django

django.setup()
from ordering.order_ids import OrderIdGenerator
from ordering.worker_ids import RedisLeaseStore, lease_worker_id

key_prefix, count = sys.argv[1], int(sys.argv[2])
lease = lease_worker_id(stores=[RedisLeaseStore(key_prefix=key_prefix)], lease_seconds=30)
generator = OrderIdGenerator(worker_lease=lease)
print("ready", flush=True)
sys.stdin.readline()
ids = [generator.next_id(shard=5, dish_bucket=77) for _ in range(count)]
print(json.dumps({"worker_id": lease.worker_id, "ids": ids}), flush=True)
lease.release()
"""


@pytest.mark.slow
def test_four_processes_issue_10000_distinct_ids(key_prefix: str) -> None:
    """Same shard and bucket everywhere, so only worker id, tick and sequence keep IDs apart.

    At 8 IDs per 10 ms tick, 2,500 IDs take each process at least 3.1 s (313 ticks).
    """
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, key_prefix, "2500"],
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for child in children:  # all have leased before any starts issuing
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [json.loads(child.communicate(timeout=60)[0]) for child in children]
    finally:
        for child in children:
            child.kill()
    assert [child.returncode for child in children] == [0, 0, 0, 0]

    worker_ids = [result["worker_id"] for result in results]
    assert len(set(worker_ids)) == 4
    all_ids: set[int] = set()
    ticks_per_process = []
    for worker_id, result in zip(worker_ids, results, strict=True):
        ids = result["ids"]
        assert len(ids) == 2_500
        assert all(a < b for a, b in pairwise(ids)), "not strictly increasing"
        parts = [decode_order_id(order_id) for order_id in ids]
        assert {p.worker_id for p in parts} == {worker_id}
        ticks_per_process.append({p.issued_at for p in parts})
        all_ids.update(ids)
    assert len(all_ids) == 10_000
    # The processes really ran at the same time: many ticks are shared by all four.
    assert len(set.intersection(*ticks_per_process)) > 100
