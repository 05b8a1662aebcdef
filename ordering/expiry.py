"""Orders left unpaid give their portions back.

An order takes its dishes' stock when it is placed. A diner who never starts paying (the app
closed, the card forgotten) would otherwise hold those portions for good, and the menu shows
them sold out. So an order still CREATED ``UNPAID_ORDER_EXPIRY_SECONDS`` after it was placed
(30 minutes; 0 turns this off) is cancelled by the platform, as the diner could have: stock and
coupon back, logged as ``platform:unpaid-expiry``. An order in PAYING is never expired here:
the diner may have paid, which only the provider can say (:mod:`ordering.payments.
reconciliation`). Runs from Celery beat every ``UNPAID_ORDER_EXPIRY_SWEEP_SECONDS``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from ordering.models import Order, OrderStatus
from ordering.services.lifecycle import expire_unpaid_order
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def expire_unpaid_orders(*, batch: int = 500, now: datetime | None = None) -> int:
    """Cancel up to ``batch`` orders left CREATED past the window, oldest first; how many.
    An order the diner starts paying meanwhile is left as it is."""
    window = settings.UNPAID_ORDER_EXPIRY_SECONDS
    if window <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=window)
    due = (
        Order.all_tenants.filter(status=OrderStatus.CREATED, created_at__lt=cutoff)
        .order_by("created_at", "pk")
        .values_list("tenant_id", "pk")[:batch]
    )
    due = list(due)
    tenants = Tenant.objects.in_bulk({tenant_id for tenant_id, _ in due})
    expired = 0
    for tenant_id, order_id in due:
        if tenant_id not in tenants:  # offboarded meanwhile
            continue
        try:
            expired += expire_unpaid_order(tenant=tenants[tenant_id], order_id=order_id)
        except Exception:  # this order alone: the others are still expired
            logger.exception("order %s could not be expired", order_id)
    return expired
