"""``manage.py purge_idempotency_records``: delete expired idempotency records and the
duplicate-hit audits past their tenant's retention (cron-safe)."""

from __future__ import annotations

from argparse import ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand

from idempotency.purge import purge_expired, purge_expired_audits


def _positive(value: str) -> int:
    """Rows per DELETE: a whole number of at least 1 (a negative one crashed the slice)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ArgumentTypeError(f"must be a whole number of at least 1, not {value!r}")
    return number


class Command(BaseCommand):
    help = (
        "Delete idempotency records, and duplicate-hit audits, whose retention has passed. "
        "Safe to run at any time."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--batch-size", type=_positive, default=None, help="default: PURGE_BATCH_SIZE"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        records = purge_expired(batch_size=options["batch_size"])
        audits = purge_expired_audits(batch_size=options["batch_size"])
        self.stdout.write(f"purged {records} expired idempotency records and {audits} audits")
