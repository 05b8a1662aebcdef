"""Sending a Celery task by name.

The outbox, dead letters and the simulated provider send messages, but the tasks that consume
them sit above them (``tasks`` imports the consumers and the saga). Naming the task instead of
importing it keeps the imports running one way.
"""

from __future__ import annotations

from typing import Any

from celery import current_app

HANDLE_OUTBOX_EVENT = "ordering.handle_outbox_event"
COMPLETE_SIMULATED_PAYMENT = "ordering.complete_simulated_payment"
SWEEP_OUTBOX = "ordering.sweep_outbox"


def enqueue(task_name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task called ``task_name`` to the configured queue (read at call time, so a test
    session can use a queue of its own); in eager mode (no broker) it runs right here."""
    task = current_app.tasks[task_name]
    task.apply_async(
        args=args, kwargs=kwargs, countdown=countdown, queue=task.app.conf.task_default_queue
    )
