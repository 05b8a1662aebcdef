"""Keeps ``bench/tokens_pipeline.py`` runnable: its core on tiny batches.

Asserts counts only (tokens, round trips, statuses), never timings. Uses the shared Redis on
DB 9 under its own ``bench:tok:smoke:<uuid>:`` prefix, which the run deletes.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit

import pytest
import redis

from bench.tokens_pipeline import (
    CHECK_EACH,
    CHECK_PIPE,
    ISSUE_EACH,
    ISSUE_PIPE,
    SIGN,
    VARIANTS,
    format_table,
    run,
)

URL = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/9")._replace(path="/9")
N, ROUNDS = 7, 3


def test_refuses_keys_outside_the_bench_prefix() -> None:
    with pytest.raises(ValueError, match="bench:tok:"):
        run(n=1, rounds=1, url=URL.geturl(), prefix="idem:")


def test_benchmark_core_counts_on_tiny_batches() -> None:
    prefix = f"bench:tok:smoke:{uuid.uuid4().hex}:"
    results = run(n=N, rounds=ROUNDS, url=URL.geturl(), prefix=prefix)
    summaries = {r.variant: r.summary() for r in results}
    assert list(summaries) == list(VARIANTS)
    for s in summaries.values():
        assert s["rounds"] == ROUNDS and s["tokens"] == N * ROUNDS
    assert summaries[ISSUE_PIPE]["round_trips"] == ROUNDS  # one pipeline per batch
    assert summaries[ISSUE_EACH]["round_trips"] == N * ROUNDS
    assert summaries[CHECK_PIPE]["round_trips"] == ROUNDS
    assert summaries[CHECK_EACH]["round_trips"] == N * ROUNDS
    assert summaries[SIGN]["round_trips"] == 0
    # both checks read freshly issued tokens: every one is there and unused
    assert summaries[CHECK_PIPE]["statuses"] == {"unused": N * ROUNDS}
    assert summaries[CHECK_EACH]["statuses"] == {"unused": N * ROUNDS}

    table = format_table(results)
    assert table.count("\n") == 1 + len(VARIANTS)
    client = redis.Redis.from_url(URL.geturl())
    try:
        assert list(client.scan_iter(match=f"{prefix}*", count=1000)) == []
    finally:
        client.close()
