"""``manage.py purge_idempotency_records``: delete expired idempotency records, the
duplicate-hit audits past their tenant's retention and the hourly outcome counts as old
(cron-safe). Every request adds to an hourly count: left out, they were kept for ever."""

from __future__ import annotations

from argparse import ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand

from idempotency.purge import purge_expired, purge_expired_audits, purge_expired_outcome_counts


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
        "Delete idempotency records, duplicate-hit audits and hourly outcome counts whose "
        "retention has passed. "
        "Safe to run at any time."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--batch-size", type=_positive, default=None, help="default: PURGE_BATCH_SIZE"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        records = purge_expired(batch_size=options["batch_size"])
        audits = purge_expired_audits(batch_size=options["batch_size"])
        counts = purge_expired_outcome_counts(batch_size=options["batch_size"])
        self.stdout.write(
            f"purged {records} expired idempotency records, {audits} audits and {counts} "
            "hourly outcome counts"
        )
