"""The daily sales read model (:class:`ordering.models.SalesDay`): a sale counted when its
order is paid, its refund when a cancel gives the money back.

Each function adds to its day's counters with one ``F()`` update; the caller
runs it in the transaction that records the effect once (the ``order.paid`` consumer's
``ProcessedEvent``, the refund step's compensation row), so a redelivery adds nothing.

A day is the restaurant's: the date in the tenant's time zone (the one its dashboard shows
times and restarts order numbers in), so an order paid at 01:00 in Shanghai is that day's sale,
not the day before's, as it would be by the server's UTC date.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import F

from ordering.models import SalesDay
from tenants.models import Tenant


def count_sale(*, tenant: Tenant, at: datetime, currency: str, amount: Decimal) -> None:
    """One more paid order of ``amount``, paid at ``at``."""
    _add(tenant=tenant, at=at, currency=currency, paid_orders=1, revenue=amount)


def count_refund(*, tenant: Tenant, at: datetime, currency: str, amount: Decimal) -> None:
    """One more refunded order, ``amount`` given back at ``at`` (the day of the refund, not
    of the sale: a day already reported keeps its figures)."""
    _add(tenant=tenant, at=at, currency=currency, refunded_orders=1, refunds=amount)


def _add(*, tenant: Tenant, at: datetime, currency: str, **amounts: object) -> None:
    day = at.astimezone(tenant.zone).date()
    row, _ = SalesDay.all_tenants.get_or_create(tenant_id=tenant.pk, day=day, currency=currency)
    SalesDay.all_tenants.filter(pk=row.pk).update(
        **{field: F(field) + amount for field, amount in amounts.items()}
    )
