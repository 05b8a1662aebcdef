"""``manage.py purge_idempotency_records``: delete expired idempotency records (cron-safe)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from idempotency.purge import purge_expired


class Command(BaseCommand):
    help = "Delete idempotency records whose retention has passed. Safe to run at any time."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=None, help="default: PURGE_BATCH_SIZE"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        purged = purge_expired(batch_size=options["batch_size"])
        self.stdout.write(f"purged {purged} expired idempotency records")
