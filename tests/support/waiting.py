"""Waiting in tests: for an event, bounded by a deadline generous enough for a busy machine.

A test that needs something to have happened (a row committed by a worker, a breaker state in
``/metrics``, a key expired, a log line written) polls for exactly that. The deadline only
bounds how long a broken run takes to fail; it is never what makes a run pass, so it is long:
120 s by default, ``TEST_WAIT_SECONDS`` to change it. A fixed ``sleep`` is not a way to wait for
something to happen: on a machine running other work it is sometimes too short.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_SECONDS = float(os.environ.get("TEST_WAIT_SECONDS", "120"))


class WaitTimedOut(AssertionError):
    """The awaited event did not happen before the deadline."""


def wait_until(
    condition: Callable[[], T],
    *,
    what: str,
    timeout: float | None = None,
    interval: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Exceptions of the types in ``ignoring`` count as "not yet" (a server still starting).
    After ``timeout`` (default :data:`DEADLINE_SECONDS`) fail with ``what`` and ``detail()``.
    """
    limit = DEADLINE_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + limit
    while True:
        try:
            result = condition()
        except ignoring:
            result = None  # type: ignore[assignment]
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimedOut(f"{what}: not within {limit:.0f} s\n{detail()}")
        time.sleep(interval)
