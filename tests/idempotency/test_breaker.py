"""The circuit breaker's state machine, on an injected clock."""

from __future__ import annotations

import pytest

from idempotency.stores.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def breaker(clock: Clock, **kwargs) -> CircuitBreaker:
    return CircuitBreaker(
        "node", clock=clock, min_calls=10, open_seconds=5, probes_to_close=2, **kwargs
    )


def test_opens_when_p99_passes_the_threshold(clock):
    b = breaker(clock)
    for _ in range(9):
        b.record(seconds=0.5, ok=True)  # slow, but too few calls to judge
    assert b.state is BreakerState.CLOSED and b.allow()
    b.record(seconds=0.5, ok=True)
    assert b.state is BreakerState.OPEN and not b.allow()


def test_a_few_slow_calls_among_many_fast_do_not_open(clock):
    b = breaker(clock)
    for i in range(200):
        b.record(seconds=0.3 if i % 100 == 0 else 0.002, ok=True)
    assert b.state is BreakerState.CLOSED


def test_opens_on_error_rate(clock):
    b = breaker(clock)
    for i in range(10):
        b.record(seconds=0.001, ok=i % 2 == 0)
    assert b.state is BreakerState.OPEN


def test_the_window_judges_the_last_500_calls_at_most(clock):
    """docs/scaling.md: a busy process's window is its last 500 calls, so a node turning slow
    is seen as fast as it is on a quiet one, not diluted by thousands of earlier calls."""
    b = breaker(clock)
    for _ in range(10_000):
        b.record(seconds=0.002, ok=True)
    for _ in range(5):  # 5 of the last 500: 1 %, not more
        b.record(seconds=0.3, ok=True)
    assert b.state is BreakerState.CLOSED
    b.record(seconds=0.3, ok=True)  # 6 of the last 500
    assert b.state is BreakerState.OPEN


def test_old_samples_leave_the_window(clock):
    b = breaker(clock, window_seconds=10)
    for _ in range(9):
        b.record(seconds=1.0, ok=False)
    clock.now = 11
    b.record(seconds=1.0, ok=False)
    assert b.state is BreakerState.CLOSED


def test_half_open_probes_close_it_again(clock):
    b = breaker(clock)
    for _ in range(10):
        b.record(seconds=1.0, ok=False)
    clock.now = 5
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow() and not b.allow()  # one probe at a time
    b.record(seconds=0.001, ok=True)
    assert b.allow()
    b.record(seconds=0.001, ok=True)
    assert b.state is BreakerState.CLOSED and b.allow()


def test_a_failed_probe_opens_it_for_another_period(clock):
    changes = []
    b = breaker(clock, on_change=lambda name, state: changes.append(state))
    for _ in range(10):
        b.record(seconds=0.001, ok=False)
    clock.now = 5
    assert b.allow()
    b.record(seconds=0.9, ok=True)  # slow probe
    assert b.state is BreakerState.OPEN
    clock.now = 9
    assert not b.allow()
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.OPEN]
