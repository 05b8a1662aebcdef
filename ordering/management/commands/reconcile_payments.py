"""``manage.py reconcile_payments [--batch N]``

Ask the payment providers about payments whose news has not come, and apply what
they say once (:mod:`ordering.payments.reconciliation`); Celery beat runs the same every
``PAYMENT_RECONCILE_SECONDS``. Prints the counts of what came of each payment asked about.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.payments.reconciliation import reconcile_payments


class Command(BaseCommand):
    help = "Ask providers about payments whose callback has not come; apply their answers once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--batch", type=int, help="Payments asked about at most (PAYMENT_RECONCILE_BATCH)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch"] is not None and options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        self.stdout.write(json.dumps(reconcile_payments(batch=options["batch"]), sort_keys=True))
