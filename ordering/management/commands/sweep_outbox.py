"""``manage.py sweep_outbox [--grace SECONDS]``: publish outbox events whose publish was lost.

Celery beat runs the same sweep every ``OUTBOX_SWEEP_SECONDS``; this is for sites without beat
(run it from cron) and for operators after a broker outage.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ordering.background.outbox import sweep_outbox


class Command(BaseCommand):
    help = "Publish outbox events still unpublished after the grace period."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--grace", type=float, default=None, help="Seconds (default: setting)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"published {sweep_outbox(grace_seconds=options['grace'])}")
