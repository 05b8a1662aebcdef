"""Keeps ``bench/api_reads.py`` runnable: a few reads per case, end to end.

A private Redis node and a uniquely named database, dropped at the end. Asserts what each case
answered, never how long it took: every read is a 200 with a body.
"""

from __future__ import annotations

import re

import pytest

from bench.api_reads import CASES
from tests.bench.bench_runs import run_bench

pytestmark = pytest.mark.slow


def test_every_read_is_measured():
    run = run_bench(
        "bench.api_reads",
        *("--dishes", "4", "--orders", "5", "--requests", "5", "--rounds", "1"),
        db_prefix="bench_reads_smoke",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        found.group(1): (int(found.group(2)), int(found.group(3)))
        for found in re.finditer(r"^(\w+)\s+(\d+)\s+(\d+)\s+\d+\s+\d+\s", run.stdout, re.M)
    }
    assert set(rows) == set(CASES), run.stdout
    assert all(status == 200 and size > 0 for status, size in rows.values()), run.stdout
