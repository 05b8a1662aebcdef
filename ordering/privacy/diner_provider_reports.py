"""What a payment provider reported against a diner's order, as the diner's copy lists it.

A report the platform could not take as it came (another amount or currency than the order's,
money taken after the order was cancelled or already paid, a success for an order no longer
waiting for one) is kept as a :class:`~ordering.models.ProviderConflict`: what the provider
said was taken from the diner, when, and how it was settled. It is a record of the diner's
money that the order's payments do not show (a payment keeps the amount the platform asked
for), so the copy lists it. Not staff's names or notes (the copy names no one), nor the
provider's event and transaction ids (as it leaves out the payment's).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ordering.models import Order

When = Callable[[datetime | None], str | None]


def provider_reports_of(order: Order, *, when: When) -> list[dict[str, Any]]:
    """The order's provider reports, oldest first, from its prefetched
    ``provider_conflicts``: what it was ``about`` (the conflict's kind), the ``amount`` and
    ``currency`` reported, the ``status`` the provider gave, when (``at``), and its
    ``outcome`` (``refunded``, ``accepted``, ``ignored``) and ``settled_at``, both ``null``
    while it is open; times written by ``when`` (the copy's own form)."""
    return [
        {
            "about": conflict.kind,
            "amount": str(conflict.reported_amount),
            "currency": conflict.reported_currency,
            "status": conflict.reported_status,
            "at": when(conflict.created_at),
            "outcome": (conflict.outcome or None) if conflict.resolved else None,
            "settled_at": when(conflict.resolved_at) if conflict.resolved else None,
        }
        for conflict in sorted(order.provider_conflicts.all(), key=lambda c: c.pk)
    ]
