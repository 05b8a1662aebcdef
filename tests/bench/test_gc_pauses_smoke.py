"""Keeps ``bench/gc_pauses.py`` runnable: a few requests per case and mode, end to end.

A private Redis node and a uniquely named database, dropped at the end. Asserts counts, never
how long a collection took: every case and mode has its row, and the frozen worker's
collector tracks a fraction of what the unfrozen one does (the hook froze start-up's objects).
"""

from __future__ import annotations

import re

import pytest

from bench.gc_pauses import CASES, MODES
from tests.bench.bench_runs import run_bench

pytestmark = pytest.mark.slow


def test_both_modes_and_cases_are_measured():
    run = run_bench("bench.gc_pauses", "--requests", "20", db_prefix="bench_gc_smoke")
    assert run.returncode == 0, run.stderr[-3000:]
    tracked = {}
    for mode in MODES:
        for case in CASES:
            row = rf"^{re.escape(mode)}\s+{case}\s+(\d+)(\s+\d+){{3}}\s+\d+\.\d\s+[\d./]+$"
            found = re.search(row, run.stdout, re.M)
            assert found, run.stdout
            tracked[mode, case] = int(found.group(1))
    for case in CASES:
        assert tracked[MODES[1], case] < tracked[MODES[0], case] / 2, tracked
    assert "plain_engine, longest full collection:" in run.stdout
