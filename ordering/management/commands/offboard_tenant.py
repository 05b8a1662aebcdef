"""``manage.py offboard_tenant TENANT --export PATH [--batch-size N] [--by NAME]
[--cancel-paid-orders] [--noinput]``

Offboard a tenant (``TENANT`` is its slug): suspend it, write its archive to ``PATH`` (a zip
of JSON files), then delete its rows, Redis keys and cached results in bounded batches
(:mod:`ordering.privacy.offboarding`). Interrupted, it continues where it stopped when run
again with the same arguments; run after the tenant is gone, it says so and changes nothing.
While the tenant's money still moves it stops, saying what it waits for; a paid order not
delivered is among those, and ``--cancel-paid-orders`` cancels every such order not on its
way to the diner yet, refunding its diner through the cancel saga.

Run from a terminal, before it starts a tenant's offboarding it shows what goes and wants the
slug typed, as the admin's action does: a slug mistyped for another restaurant's, or a line
recalled from the shell's history, erased a whole restaurant without a word. Anything else
typed, or the input ended (Ctrl-D), does nothing. ``--noinput`` (Django's convention) skips the
question; so does a run with no terminal to ask (a script, cron, ``call_command``), whose
arguments were written down on purpose. Continuing an offboarding already under way asks
nothing: that was decided when it started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.management.confirmation import add_noinput, asks, confirm_by_typing
from ordering.management.requester import operator, requester
from ordering.models import Order, TenantOffboarding
from ordering.privacy.offboarding import (
    OffboardingRefused,
    cancel_paid_orders,
    run_offboarding,
    start_offboarding,
)
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Offboard a tenant: suspend, export its archive, then erase everything of it."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("tenant", help="The tenant's slug")
        parser.add_argument("--export", required=True, type=Path, help="Where to write the zip")
        parser.add_argument("--batch-size", type=int, default=500, help="Rows or keys per step")
        parser.add_argument(
            "--by", type=requester, help="Who asked (kept on the job); default: you"
        )
        parser.add_argument(
            "--cancel-paid-orders",
            action="store_true",
            help="Cancel every paid order not on its way yet (PAID to READY), refunding its "
            "diner through the cancel saga",
        )
        add_noinput(parser, skips="the tenant's slug before its offboarding starts")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            done = TenantOffboarding.objects.filter(
                tenant_slug=options["tenant"], phase=TenantOffboarding.Phase.DONE
            ).first()
            if done is None:
                raise CommandError(f"no tenant with slug {options['tenant']!r}")
            self.stdout.write(f"{done.tenant_slug} was offboarded by job {done.pk}; nothing to do")
            return
        under_way = (
            TenantOffboarding.objects.filter(tenant_ref=tenant.pk)
            .exclude(phase=TenantOffboarding.Phase.DONE)
            .exists()
        )
        if asks(options) and not under_way:
            self.confirm(tenant, export=options["export"])
        try:
            job = start_offboarding(
                tenant=tenant,
                export_path=options["export"].resolve(),
                requested_by=options["by"] or operator(),
                batch_size=options["batch_size"],
            )
        except OffboardingRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"offboarding {job.pk} of {tenant.slug}: {job.phase}")
        job = run_offboarding(job.pk)
        if options["cancel_paid_orders"]:
            cancelled = cancel_paid_orders(job)
            if cancelled:
                ids = ", ".join(map(str, cancelled))
                self.stdout.write(
                    f"cancelled paid orders {ids}: the cancel saga refunds their diners"
                )
            # stepped again even when this run cancelled nothing: another run (or staff) may
            # have cancelled them meanwhile, and the job's words from before would say they
            # still wait to be cancelled
            job = run_offboarding(job.pk)
        if not job.is_done:  # suspended, its money still moving: nothing closed or removed
            raise CommandError(f"offboarding {job.pk} of {tenant.slug}: {job.last_error}")
        self.stdout.write(
            f"done: archive {job.export_path} (sha256 {job.export_sha256}); "
            f"removed {json.dumps(job.counts, sort_keys=True)} in {job.batches} batches"
        )

    def confirm(self, tenant: Tenant, *, export: Path) -> None:
        """Say what goes and return only once the operator typed the slug (module docstring)."""
        orders = Order.all_tenants.filter(tenant=tenant).count()
        confirm_by_typing(
            self,
            what_goes=(
                f"Offboarding {tenant.slug} ({tenant.name}, {orders} orders) exports its data "
                f"to {export}, then erases everything it has: orders, payments, menu, keys, "
                "members and stored answers. This cannot be undone."
            ),
            expected=tenant.slug,
            name="the slug",
            action="offboard it",
        )
