"""A circuit breaker per Redis node (DESIGN §3 layer 5, seed ch. 5).

The engine asks :meth:`CircuitBreaker.allow` before using a node and reports every call's
latency and success. The breaker opens when, over a sliding window, the p99 latency passes the
threshold (default 200 ms; at least three slow calls) or the error rate does (default 50 %),
once enough calls were seen.
While open, the engine runs database-only for the tenants of that node — still exactly-once,
only slower. After ``open_seconds`` a few probe calls are let through (half-open); if they are
healthy the breaker closes, if one fails it opens again.

One breaker per node, so one sick shard does not degrade the other tenants.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum

logger = logging.getLogger(__name__)


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        window_seconds: float = 10.0,
        min_calls: int = 20,
        p99_threshold_ms: float = 200.0,
        error_rate_threshold: float = 0.5,
        open_seconds: float = 5.0,
        probes_to_close: int = 3,
        max_samples: int = 500,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, BreakerState], None] | None = None,
    ) -> None:
        self.name = name
        self._window = window_seconds
        self._min_calls = min_calls
        self._p99_threshold = p99_threshold_ms / 1000
        self._error_rate = error_rate_threshold
        self._open_seconds = open_seconds
        self._probes_to_close = probes_to_close
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._max_samples = max_samples
        self._samples: deque[tuple[float, float, bool]] = deque()
        # Running counts over _samples: every call costs O(1), whatever the window holds.
        self._errors = 0
        self._slow = 0
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._probes_in_flight = 0
        self._probe_successes = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            self._maybe_half_open()
            return self._state

    def observed_state(self) -> BreakerState:
        """The state for a caller that only reports on the node (a scrape, a readiness probe,
        the admin) or will not probe it: an open breaker whose ``open_seconds`` have passed
        stays open here, as no probe has been let through yet; only :meth:`allow` moves it on
        to half-open. Reading :attr:`state` moved it, and its gauge, so each scrape during an
        outage with no request to probe the dead node read half-open (1), and the page on an
        open breaker resolved while the node was still down."""
        with self._lock:
            return self._state

    def allow(self) -> bool:
        """May the caller use the node now? In half-open, one probe at a time."""
        with self._lock:
            self._maybe_half_open()
            if self._state is BreakerState.CLOSED:
                return True
            if self._state is BreakerState.HALF_OPEN and self._probes_in_flight == 0:
                self._probes_in_flight = 1
                return True
            return False

    def record(self, *, seconds: float, ok: bool) -> None:
        """Report one call to the node: how long it took and whether it worked."""
        with self._lock:
            now = self._clock()
            if self._state is BreakerState.HALF_OPEN:
                self._probes_in_flight = 0
                if ok and seconds <= self._p99_threshold:
                    self._probe_successes += 1
                    if self._probe_successes >= self._probes_to_close:
                        self._clear_samples()
                        self._set(BreakerState.CLOSED, "probes healthy")
                else:
                    self._open(now, f"probe {'slow' if ok else 'failed'} ({seconds * 1000:.0f} ms)")
                return
            if self._state is BreakerState.OPEN:
                return
            if len(self._samples) >= self._max_samples:
                self._drop_oldest()
            self._samples.append((now, seconds, ok))
            self._errors += not ok
            self._slow += seconds > self._p99_threshold
            reason = self._unhealthy(now)
            if reason:
                self._open(now, reason)

    def _unhealthy(self, now: float) -> str | None:
        while self._samples and self._samples[0][0] < now - self._window:
            self._drop_oldest()
        if len(self._samples) < self._min_calls:
            return None
        errors = self._errors
        if errors / len(self._samples) >= self._error_rate:
            return f"error rate {errors}/{len(self._samples)}"
        # "p99 over the threshold" = more than 1 % of the calls were slower than it; and at
        # least three, so that one GC pause among a handful of calls does not open the breaker.
        slow = self._slow
        if slow > max(0.01 * len(self._samples), 2):
            return (
                f"p99 over {self._p99_threshold * 1000:.0f} ms "
                f"({slow} of {len(self._samples)} calls slower)"
            )
        return None

    def _drop_oldest(self) -> None:
        _, seconds, ok = self._samples.popleft()
        self._errors -= not ok
        self._slow -= seconds > self._p99_threshold

    def _clear_samples(self) -> None:
        self._samples.clear()
        self._errors = self._slow = 0

    def _maybe_half_open(self) -> None:
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self._open_seconds
        ):
            self._probes_in_flight = 0
            self._probe_successes = 0
            self._set(BreakerState.HALF_OPEN, "probing")

    def _open(self, now: float, reason: str) -> None:
        self._opened_at = now
        self._clear_samples()
        self._set(BreakerState.OPEN, reason)

    def _set(self, state: BreakerState, reason: str) -> None:
        if state is self._state:
            return
        log = logger.warning if state is BreakerState.OPEN else logger.info
        log("redis breaker %s: %s -> %s (%s)", self.name, self._state, state, reason)
        self._state = state
        if self._on_change:
            self._on_change(self.name, state)
