"""Keeps ``bench/bloom_vs_claim.py`` runnable: its core function on a tiny workload.

Asserts counts only (outcomes, round trips, filter verdicts), never timings. Uses the shared
Redis on DB 7 under its own ``bench:bloom:smoke:<uuid>:`` prefix, which the run deletes.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit

import pytest
import redis

from bench.bloom_vs_claim import (
    CLAIM,
    LOCAL,
    REDIS,
    UNSAFE,
    VARIANTS,
    BloomFilter,
    format_table,
    run,
)

URL = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/7")._replace(path="/7")
N, NEW, POOL = 40, 20, 5


def test_bloom_filter_has_no_false_negatives() -> None:
    bloom = BloomFilter(capacity=100)
    assert bloom.k == 7
    assert [bloom.add(f"k{i}") for i in range(3)] == [False] * 3
    assert all(bloom.add(f"k{i}") for i in range(3))
    assert all(f"k{i}" in bloom for i in range(3))


def test_refuses_keys_outside_the_bench_prefix() -> None:
    with pytest.raises(ValueError, match="bench:bloom:"):
        run(n_requests=2, url=URL.geturl(), prefix="idem:")


def test_benchmark_core_counts_on_a_tiny_workload() -> None:
    prefix = f"bench:bloom:smoke:{uuid.uuid4().hex}:"
    results = run(
        n_requests=N,
        new_ratios=(0.5,),
        workers=2,
        pool_size=POOL,
        blocks=2,
        url=URL.geturl(),
        prefix=prefix,
    )
    summaries = {r.variant: r.summary() for r in results}
    assert list(summaries) == list(VARIANTS)
    for s in summaries.values():
        assert (s["requests"], s["new_requests"], s["dup_requests"]) == (N, NEW, N - NEW)
        assert s["latencies"] == N

    for name in (CLAIM, LOCAL, REDIS):  # every request claims: duplicates all replay
        assert summaries[name]["outcomes"] == {"MISS": NEW, "HIT": N - NEW}
        assert summaries[name]["dups_executed"] == 0
    assert summaries[CLAIM]["round_trips"] == N
    assert summaries[CLAIM]["bloom_new"] == 0
    assert summaries[LOCAL]["round_trips"] == N  # the in-process check costs no round trip
    assert summaries[REDIS]["round_trips"] == 2 * N  # bitmap script, then the claim
    assert summaries[REDIS]["false_new"] == 0  # one shared filter never misses a seen key

    unsafe = summaries[UNSAFE]
    skipped = unsafe["outcomes"].get("SKIPPED", 0)
    assert skipped == unsafe["bloom_new"] > 0
    assert sum(unsafe["outcomes"].values()) == N
    assert unsafe["round_trips"] == N - skipped
    assert unsafe["dups_executed"] == unsafe["false_new"]

    assert format_table(results).count("\n") == 1 + len(VARIANTS)
    client = redis.Redis.from_url(URL.geturl())
    try:
        assert list(client.scan_iter(match=f"{prefix}*", count=1000)) == []
    finally:
        client.close()
