"""``manage.py reclaim_stale_leases``: free leases of processes that stopped heartbeating.

Workers do this when they start and beat every ``STALE_LEASE_SWEEP_SECONDS``; run this from cron
(or a deploy hook) where no beat runs. See ``ordering/instances.py``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from ordering.instances import reclaim_stale_leases


class Command(BaseCommand):
    help = "Reclaim idempotency claims and order-ID worker ids of dead processes."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(json.dumps(reclaim_stale_leases().as_dict()))
