"""Keeps ``bench/cpu_per_request.py`` runnable: a few requests per case, end to end.

A private Redis node (nothing shared is flushed) and a uniquely named database, dropped at the
end. Asserts that every case answered and was measured (the worker, its PostgreSQL backend and
the Redis server), never how fast.
"""

from __future__ import annotations

import re

import pytest

from bench.cpu_per_request import CASES, check_answers
from tests.bench.bench_runs import run_bench

pytestmark = pytest.mark.slow


def test_every_case_and_round_trip_is_measured():
    run = run_bench(
        "bench.cpu_per_request", "--requests", "5", "--rounds", "2", db_prefix="bench_cpu_smoke"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for case in CASES:
        # worker, database, redis, total, then the worker's rounds; PostgreSQL is local here,
        # so its backend's CPU is measured ("-" only where it runs on another machine)
        row = rf"^{case}\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+, \d+$"
        assert re.search(row, run.stdout, re.M), run.stdout
    for peer in ("@idempotent", "drf-idempotency"):
        parts = r"worker -?\d+, database -?\d+, redis -?\d+, total -?\d+ µs"
        assert re.search(rf"^added by {peer}:\s+{parts}$", run.stdout, re.M), run.stdout
    assert re.search(r"Redis EVALSHA \d+ µs, PostgreSQL SELECT 1 \d+ µs", run.stdout)
    added = r"@idempotent / drf-idempotency added CPU: -?\d+\.\d\d \(worker\), -?\d+\.\d\d"
    assert re.search(added, run.stdout), run.stdout
    assert re.search(r"engine_replay_redis / engine_replay CPU: \d+\.\d\d", run.stdout)


def test_a_run_whose_answers_are_not_the_expected_ones_is_refused():
    created, missing = ("201 Created", "MISS"), ("404 Not Found", "-")
    check_answers("/api/bench/plain/", [created, created])
    with pytest.raises(RuntimeError, match=r"1 answers were not as expected: .*404"):
        check_answers("/api/bench/plain/", [created, missing])
    # a replay must be a HIT
    check_answers("/api/bench/plain-engine/", [("201 Created", "HIT")], replay=True)
    with pytest.raises(RuntimeError, match="not as expected"):
        check_answers("/api/bench/plain-engine/", [created], replay=True)
