"""``manage.py erase_diner TENANT DINER_ID [--by NAME] [--noinput]``

Erase one diner of one tenant (``TENANT`` is the tenant's slug): sessions, stored replies,
audits, tokens and Redis keys go; orders stay for the accounts under a pseudonym
(:mod:`ordering.privacy.diners`). Prints what was removed. Running it twice is safe, and so is
running it again after a Redis node failed to answer (it says so).

Run from a terminal, it says how many orders the diner has there and wants the diner id typed
before it erases (:mod:`ordering.management.confirmation`), as the Privacy page asks for a
confirmation: a mistyped id is another diner's. ``--noinput``, a script or cron ask nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisClusterException, RedisError

from ordering.management.confirmation import add_noinput, asks, confirm_by_typing
from ordering.management.requester import operator, requester
from ordering.models import Order
from ordering.privacy.diners import (
    NotADinerId,
    TenantLeaving,
    check_diner_id,
    check_erasable,
    erase_diner,
)
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Erase a diner: anonymise their orders, remove their replies, audits, sessions, keys."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("tenant", help="The tenant's slug")
        parser.add_argument("diner_id")
        parser.add_argument(
            "--by", type=requester, help="Who asked (kept in the erasure log); default: you"
        )
        add_noinput(parser, skips="the diner id before the erasure")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant with slug {options['tenant']!r}")
        who = options["by"] or operator()
        diner_id = options["diner_id"]
        try:
            if asks(options):
                check_diner_id(diner_id)
                check_erasable(tenant)
                self.confirm(tenant, diner_id)
            log = erase_diner(tenant=tenant, diner_id=diner_id, requested_by=who)
        except (NotADinerId, TenantLeaving) as exc:
            raise CommandError(str(exc)) from None
        except (RedisError, RedisClusterException) as exc:
            raise CommandError(
                f"a Redis node did not answer ({exc}); the erasure stopped and logged nothing: "
                "run it again once every node answers, and it finishes what is left"
            ) from None
        self.stdout.write(
            f"erasure {log.pk}: diner now {log.pseudonym}; removed {json.dumps(log.counts)}"
        )

    def confirm(self, tenant: Tenant, diner_id: str) -> None:
        """Say what goes and return only once the operator typed the diner id."""
        orders = Order.all_tenants.filter(tenant=tenant, diner_id=diner_id).count()
        confirm_by_typing(
            self,
            what_goes=(
                f"Erasing diner {diner_id!r} of {tenant.slug} ({orders} orders) puts their "
                "orders under a pseudonym and removes their sessions, stored replies, audits "
                "and tokens. This cannot be undone."
            ),
            expected=diner_id,
            name="the diner id",
            action="erase them",
        )
