"""Keeps ``bench/instructions.py`` runnable without paying for valgrind in the suite: the
measured process of every case runs directly (a few requests, each answer checked), and the
report computes its ratios. A private Redis node and a uniquely named database, dropped at the
end. Asserts answers and arithmetic, never a count of instructions."""

from __future__ import annotations

import re
import uuid

import pytest

from bench.http_load import Options, recreate_database
from bench.instructions import PATHS, WARMUP, prepare, report, run_measured
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.slow


def run_child(env, tenant, case, n):
    return run_measured(env, tenant, case, n, timeout=300)


def test_every_case_answers_as_the_benchmark_expects_and_a_wrong_answer_fails_the_run():
    node = RedisNode().start()
    opts = Options(
        db_name=f"bench_instr_smoke_{uuid.uuid4().hex[:8]}",
        redis_url=f"redis://127.0.0.1:{node.port}/0",
    )
    try:
        env, tenant = prepare(opts)
        runs = {case: run_child(env, tenant, case, 3) for case in PATHS}
        # a replay of more keys than the warm-up placed still replays (keys are cycled)
        cycled = run_child(env, tenant, "order_replay", WARMUP + 2)
        # order requests whose diner token is not valid (every answer a 401)
        stranger = dict(tenant, tokens=["not-a-token"] * len(tenant["tokens"]))
        refused = run_child(env, stranger, "order_create", 2)
    finally:
        recreate_database(opts.db_name, drop_only=True)
        node.remove()
    failed = {case: r.stderr[-2000:] for case, r in runs.items() if r.returncode != 0}
    assert failed == {}
    assert cycled.returncode == 0, cycled.stderr[-2000:]
    # the measured process refuses to count a run whose answers are not the expected ones
    assert refused.returncode != 0
    assert "answers were not as expected" in refused.stderr


def test_the_report_gives_each_case_and_its_ratios(capsys):
    report({"plain": 3_000_000, "plain_engine": 6_000_000, "order_create": 9_900_000}, 30)
    out = capsys.readouterr().out
    assert re.search(r"^plain_engine +6,000,000$", out, re.M)
    assert "plain_engine / plain: 2.00" in out
    assert "order_create / plain: 3.30" in out
    assert "plain_peer" not in out  # a ratio is printed only when both cases ran
