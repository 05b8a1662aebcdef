"""Keeps ``bench/engine_steps.py`` runnable and honest: a few requests, end to end.

A private Redis node and a uniquely named database, dropped at the end. Asserts that every step
was measured and ran once per request, never how long it took.
"""

from __future__ import annotations

import re

import pytest

from bench.engine_steps import ENGINE, REQUEST, STEPS, check_calls, measure_round, timed_steps
from idempotency.stores import database as db_store
from tests.bench.bench_runs import run_bench


@pytest.mark.slow
def test_every_step_is_measured_once_per_request():
    run = run_bench(
        "bench.engine_steps", "--requests", "5", "--rounds", "1", db_prefix="bench_steps_smoke"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = dict(re.findall(r"^(.+?)\s+(-?\d+)\s+-?\d+\.\d %$", run.stdout, re.M))
    inner = [step.label for step in STEPS if step.label != ENGINE]
    expected = [*inner, "the rest of the engine", "the rest of the request (middleware, DRF)"]
    expected.append(REQUEST)
    assert list(rows) == expected, run.stdout
    assert all(int(rows[label]) > 0 for label in inner), run.stdout


def test_a_step_that_did_not_run_once_per_request_refuses_the_run():
    check_calls({"Redis claim": 3, "the view": 3}, 3)
    with pytest.raises(RuntimeError, match=r"'Redis claim': 0"):
        check_calls({"Redis claim": 0, "the view": 3}, 3)
    with pytest.raises(RuntimeError, match=r"'the view': 6"):
        check_calls({"Redis claim": 3, "the view": 6}, 3)


def test_a_round_in_which_the_engine_did_not_run_is_refused():
    # an application that answers 201 without the engine: every step ran 0 times
    def answer_without_the_engine(environ, start_response):
        start_response("201 Created", [])
        return [b"{}"]

    with pytest.raises(RuntimeError, match="did not run once per request in 2"):
        measure_round(answer_without_the_engine, 2)


def test_the_wrapped_functions_are_put_back():
    original = db_store.insert_record
    spent = {step.label: 0.0 for step in STEPS}
    calls = dict.fromkeys(spent, 0)
    with timed_steps(spent, calls):
        assert db_store.insert_record is not original
    assert db_store.insert_record is original
