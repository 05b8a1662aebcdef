"""What a diner wrote on an order is cleared once the order has long stopped moving.

An order's note, contact phone and delivery address are for the restaurant to make and deliver
it; the books need none of them. Kept until the tenant left, they were personal data with no
use. ``ORDER_CONTACT_RETENTION_DAYS`` (30) after an order's last change (``updated_at``), the
retention purge (:mod:`tenants.retention`, Celery beat and ``manage.py purge_expired_data``)
writes them empty, in batches; the order, its lines, money and diner id stay. Whatever the
order's status: a restaurant that never marks its orders completed left them PAID or READY for
good, with their contact details, and an order is made and delivered in hours, not in a month
without a change. The update leaves ``updated_at`` as it was: nothing the board shows changed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from ordering.models import Order
from ordering.models.orders import CONTACT_TO_CLEAR
from ordering.privacy.order_batches import over_orders
from tenants.retention import register_kind
from tenants.write_fence import writable

KIND = "order_contact_details"
CLEARED = ("note", "contact_phone", "delivery_address")


def contact_details_past_retention(now: datetime) -> Q:
    """Orders last changed before the retention that still hold something a diner wrote (the
    condition of the partial index ``order_contact_to_clear``, which serves it), in any
    status; not those of a tenant being offboarded: its rows are fenced (an update of one
    would fail the whole purge, :mod:`tenants.write_fence`) and its offboarding deletes them."""
    cutoff = now - timedelta(days=settings.ORDER_CONTACT_RETENTION_DAYS)
    return CONTACT_TO_CLEAR & Q(updated_at__lt=cutoff) & writable()


def register() -> None:
    """Make the retention purge clear them (from the ordering app's ``ready()``)."""
    register_kind(
        KIND,
        Order,
        contact_details_past_retention,
        over_orders(lambda orders: orders.update(**dict.fromkeys(CLEARED, ""))),
    )
