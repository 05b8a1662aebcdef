"""``manage.py purge_expired_data``: the retention purge once, by hand or from the demo
(Celery beat runs the same service on its schedule, ``tenants.tasks``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tenants.retention import purge_expired_data


class Command(BaseCommand):
    help = (
        "Delete what has outlived its retention (docs/data-protection.md), and clear what diners "
        "wrote on orders finished long ago."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for kind, rows in purge_expired_data().items():
            self.stdout.write(f"purged {rows} {kind.replace('_', ' ')}")
