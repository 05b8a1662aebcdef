"""Sending a Celery task by name.

The outbox, dead letters and the simulated provider send messages, but the tasks that consume
them sit above them (``tasks`` imports the consumers and the saga). Naming the task instead of
importing it keeps the imports running one way.

A send the broker does not take within its socket timeout (2 s, ``config/celery.py``, on each
of the publish's three attempts: about 8 s in all) fails, and every caller leaves its message
to a sweeper or a retry. While a broker hangs, each send would wait that long; so one failed
send stops this process sending for a few seconds (``BROKER_PAUSE_SECONDS``, a circuit
breaker): sends in that time fail at once with :class:`BrokerUnavailable`, then one send
probes the broker again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from celery import Task, current_app
from django.db import connections
from django.db.models import QuerySet
from django.db.models.functions import Now

from idempotency.stores.breaker import BreakerState, CircuitBreaker

logger = logging.getLogger(__name__)

HANDLE_OUTBOX_EVENT = "ordering.handle_outbox_event"
COMPLETE_SIMULATED_PAYMENT = "ordering.complete_simulated_payment"
SWEEP_OUTBOX = "ordering.sweep_outbox"
OFFBOARD_TENANT = "ordering.offboard_tenant"
REFUND_UNWANTED_CAPTURE = "ordering.refund_unwanted_capture"
REFUND_DEPARTED_CAPTURE = "ordering.refund_departed_capture"
# Names of the timer threads that run delayed tasks in eager mode (tests wait for them).
DELAYED_THREAD_PREFIX = "delayed-task:"
# How long one failed send stops this process sending, before one send probes the broker again
BROKER_PAUSE_SECONDS = 5.0


class BrokerUnavailable(Exception):
    """Not sent, not even tried: a send from this process failed moments ago."""


def broker_breaker(clock: Callable[[], float] = time.monotonic) -> CircuitBreaker:
    """The breaker in front of this process's sends: open after one failed send, or after
    three slower than the broker's socket timeout in ten seconds; closed again by one send
    that works."""
    return CircuitBreaker(
        "celery-broker",
        window_seconds=10.0,
        min_calls=1,
        error_rate_threshold=1e-9,  # any failed send among the window's
        p99_threshold_ms=2_000.0,
        open_seconds=BROKER_PAUSE_SECONDS,
        probes_to_close=1,
        clock=clock,
    )


_broker = broker_breaker()


def broker_paused() -> bool:
    """Are this process's sends paused by a recent failure? (Asking takes no probe.)"""
    return _broker.state is BreakerState.OPEN


def send_due_again(
    due: Iterable[tuple[Any, datetime]],
    *,
    still_due: Callable[[Any], QuerySet],
    send: Callable[[Any], bool],
) -> int:
    """Send again each due row (its key and when it was last touched), in turn; how many were
    sent. Each is marked as sent now (``still_due(key)``, the row while still pending, gets
    ``updated_at`` now), so a queue that is merely slow gets one copy per wait, not one per
    run. A send the broker did not take is no send: the row is put back as it was, due for
    the next run, and this run stops while sends are paused instead of marking the rest of
    the batch sent, the next run going on from there."""
    sent = 0
    for key, last_touched in due:
        if broker_paused():
            break
        pending = still_due(key)
        pending.update(updated_at=Now())
        if send(key):
            sent += 1
        else:
            pending.update(updated_at=last_touched)
    return sent


def enqueue(task_name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task called ``task_name`` to the configured queue (read at call time, so a test
    session can use a queue of its own); in eager mode (no broker) it runs right here, or, with
    a ``countdown``, in this process once the countdown has passed.

    Raises what the broker's client raised, or :class:`BrokerUnavailable` while a recent
    failure pauses this process's sends."""
    task = current_app.tasks[task_name]
    if task.app.conf.task_always_eager:  # no broker: nothing to pause
        if countdown:
            _run_later(task, countdown, args, kwargs)
        else:
            task.apply_async(args=args, kwargs=kwargs)
        return
    if not _broker.allow():
        raise BrokerUnavailable(f"the broker failed a send in the last {BROKER_PAUSE_SECONDS} s")
    started = time.monotonic()
    try:
        task.apply_async(
            args=args, kwargs=kwargs, countdown=countdown, queue=task.app.conf.task_default_queue
        )
    except Exception:
        _broker.record(seconds=time.monotonic() - started, ok=False)
        raise
    _broker.record(seconds=time.monotonic() - started, ok=True)


def enqueue_or_run_here(task_name: str, *args: Any, countdown: float, **kwargs: Any) -> None:
    """Send like :func:`enqueue`; when the broker does not take the message, run the task in
    this process once ``countdown`` has passed, as eager mode does. For a message that stands
    for something outside the platform, which an outage of our broker would not stop (the
    demo's simulated provider confirming a payment by itself): without it, a payment started
    while Redis was down stayed PAYING, since the provider's books never recorded it either.
    Demo-grade, like eager mode: lost if the process exits first."""
    try:
        enqueue(task_name, *args, countdown=countdown, **kwargs)
    except Exception as exc:
        logger.warning(
            "%s not sent to the broker (%s); this process runs it in %s s",
            task_name,
            exc,
            countdown,
        )
        _run_later(current_app.tasks[task_name], countdown, args, kwargs)


def _run_later(task: Task, delay: float, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Eager mode runs a task at once and ignores its countdown; but a delay is part of what the
    task means (the simulated provider confirms a payment *after* a while, so the demo shows
    PAYING). With no broker to hold the message, a daemon timer thread of this process runs it
    when it is due, on its own database connection. Demo-grade: like an unsent message, it is
    lost if the process exits first."""

    def run() -> None:
        try:
            result = task.apply(args=args, kwargs=kwargs)
            if result.failed():
                logger.error("delayed task %s failed: %r", task.name, result.result)
        finally:
            connections.close_all()

    timer = threading.Timer(delay, run)
    timer.name = f"{DELAYED_THREAD_PREFIX}{task.name}"
    timer.daemon = True
    timer.start()
