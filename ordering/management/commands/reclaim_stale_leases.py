"""``manage.py reclaim_stale_leases``: free leases of processes that stopped heartbeating.

Workers do this when they start and beat every ``STALE_LEASE_SWEEP_SECONDS``; run this from cron
(or a deploy hook) where no beat runs. See ``ordering/instances.py``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisClusterException, RedisError

from ordering.instances import reclaim_stale_leases


class Command(BaseCommand):
    help = "Reclaim idempotency claims and order-ID worker ids of dead processes."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = reclaim_stale_leases()
        except (RedisError, RedisClusterException) as exc:
            # each release is a compare-owner-then-delete: a run stopped half-way leaves
            # nothing wrong, and the next one finds what is left
            raise CommandError(
                f"a Redis node did not answer ({exc}); what this run released stays released: "
                "run it again once every node answers"
            ) from None
        self.stdout.write(json.dumps(report.as_dict()))
