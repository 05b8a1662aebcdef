"""The daily sales read model (:class:`ordering.models.SalesDay`): a sale counted when its
order is paid, its refund when a cancel gives the money back.

Each function adds to its day's counters with one ``F()`` update; the caller
runs it in the transaction that records the effect once (the ``order.paid`` consumer's
``ProcessedEvent``, the refund step's compensation row), so a redelivery adds nothing.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db.models import F

from ordering.models import SalesDay


def count_sale(*, tenant_id: int, day: date, currency: str, amount: Decimal) -> None:
    """One more paid order of ``amount`` on ``day``."""
    _add(tenant_id=tenant_id, day=day, currency=currency, paid_orders=1, revenue=amount)


def count_refund(*, tenant_id: int, day: date, currency: str, amount: Decimal) -> None:
    """One more refunded order, ``amount`` given back, on ``day`` (the day of the refund, not
    of the sale: a day already reported keeps its figures)."""
    _add(tenant_id=tenant_id, day=day, currency=currency, refunded_orders=1, refunds=amount)


def _add(*, tenant_id: int, day: date, currency: str, **amounts: object) -> None:
    row, _ = SalesDay.all_tenants.get_or_create(tenant_id=tenant_id, day=day, currency=currency)
    SalesDay.all_tenants.filter(pk=row.pk).update(
        **{field: F(field) + amount for field, amount in amounts.items()}
    )
