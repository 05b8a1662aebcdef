"""The contract suite's ``VIEW_EXECUTED_HOOK``: how many times the engine ran a view body, per
key. The suite's live server runs in the test's own process (a thread per request), so a
counter in memory sees every execution."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_runs: Counter[tuple[str, str]] = Counter()


def count(*, tenant: str, endpoint: str, key: str) -> None:
    with _lock:
        _runs[(tenant, key)] += 1


def runs(tenant: str, key: str) -> int:
    with _lock:
        return _runs[(tenant, key)]


def reset() -> None:
    with _lock:
        _runs.clear()
