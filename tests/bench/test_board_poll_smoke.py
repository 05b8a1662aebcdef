"""Keeps ``bench/board_poll.py`` runnable: a few polls per case, end to end.

A private Redis node and a uniquely named database, dropped at the end. Asserts what each case
answered, never how long it took: a changed board is rendered (200, its cards' bytes), an
unchanged one is a 304 with no body and fewer statements.
"""

from __future__ import annotations

import re

import pytest

from tests.bench.bench_runs import run_bench

pytestmark = pytest.mark.slow


def test_both_cases_are_measured():
    run = run_bench(
        "bench.board_poll",
        "--orders",
        "6",
        "--polls",
        "5",
        "--rounds",
        "1",
        db_prefix="bench_board_smoke",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        found.group(1): [int(found.group(n)) for n in (2, 3, 4)]
        for found in re.finditer(
            r"^(changed|unchanged)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s", run.stdout, re.M
        )
    }
    assert set(rows) == {"changed", "unchanged"}, run.stdout
    (changed_status, changed_bytes, changed_queries) = rows["changed"]
    (unchanged_status, unchanged_bytes, unchanged_queries) = rows["unchanged"]
    assert (changed_status, unchanged_status, unchanged_bytes) == (200, 304, 0)
    assert changed_bytes > 0 and unchanged_queries < changed_queries
    assert re.search(r"^unchanged / changed worker CPU: \d+\.\d\d$", run.stdout, re.M)
