"""Sending a Celery task by name.

The outbox, dead letters and the simulated provider send messages, but the tasks that consume
them sit above them (``tasks`` imports the consumers and the saga). Naming the task instead of
importing it keeps the imports running one way.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Task, current_app
from django.db import connections

logger = logging.getLogger(__name__)

HANDLE_OUTBOX_EVENT = "ordering.handle_outbox_event"
COMPLETE_SIMULATED_PAYMENT = "ordering.complete_simulated_payment"
SWEEP_OUTBOX = "ordering.sweep_outbox"
OFFBOARD_TENANT = "ordering.offboard_tenant"
# Names of the timer threads that run delayed tasks in eager mode (tests wait for them).
DELAYED_THREAD_PREFIX = "delayed-task:"


def enqueue(task_name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task called ``task_name`` to the configured queue (read at call time, so a test
    session can use a queue of its own); in eager mode (no broker) it runs right here, or, with
    a ``countdown``, in this process once the countdown has passed."""
    task = current_app.tasks[task_name]
    if countdown and task.app.conf.task_always_eager:
        _run_later(task, countdown, args, kwargs)
        return
    task.apply_async(
        args=args, kwargs=kwargs, countdown=countdown, queue=task.app.conf.task_default_queue
    )


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
