"""Run pieces of work at the same instant, each on its own thread and database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def at_once(*work: Callable[[], object], timeout: float = 60) -> list[object]:
    """Each callable's result, or the exception it raised, in the order given; the threads
    are released together by a barrier, and each closes its database connection."""
    barrier = threading.Barrier(len(work))
    results: list[object] = [None] * len(work)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results
