"""Orders left unpaid give their portions back.

An order takes its dishes' stock when it is placed. A diner who never pays (the app closed, the
card forgotten or declined) would otherwise hold those portions for good, and the menu shows
them sold out. So the platform cancels, as the diner could have, an order still CREATED
``UNPAID_ORDER_EXPIRY_SECONDS`` after it was placed (30 minutes; 0 turns this off), and an
order in PAYING whose every payment was declined that long ago: stock and coupon back, logged
as ``platform:unpaid-expiry``. An order with a payment still pending, or any other, is never
expired: whether the diner paid is the provider's to say (:mod:`ordering.payments.
reconciliation`). If a declined payment turns out paid after all, reconciliation or the late
callback finds it, and money taken for a cancelled order is refunded
(:mod:`ordering.payments.capture_refunds`). Runs from
Celery beat every ``UNPAID_ORDER_EXPIRY_SWEEP_SECONDS``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from ordering.models import Order, OrderStatus, Payment
from ordering.services.lifecycle import expire_unpaid_order
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def expire_unpaid_orders(*, batch: int = 500, now: datetime | None = None) -> int:
    """Cancel up to ``batch`` orders of each kind left unpaid past the window, oldest first;
    how many. An order the diner starts paying (or pays) meanwhile is left as it is."""
    window = settings.UNPAID_ORDER_EXPIRY_SECONDS
    if window <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=window)
    never_paid = Order.all_tenants.filter(status=OrderStatus.CREATED, created_at__lt=cutoff)
    payments = Payment.all_tenants.filter(order=OuterRef("pk"))
    declined = Order.all_tenants.filter(
        Exists(payments),
        ~Exists(payments.exclude(status=Payment.Status.FAILED)),
        ~Exists(payments.filter(updated_at__gte=cutoff)),
        status=OrderStatus.PAYING,
        updated_at__lt=cutoff,
    )
    due = [
        row
        for orders in (never_paid, declined)
        for row in orders.order_by("created_at", "pk").values_list("tenant_id", "pk")[:batch]
    ]
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
