"""The retention purge's action for a kind of orders, in its batches.

Two kinds of the purge are orders (``contact_retention`` clears what a diner wrote,
``guest_orders`` deletes guests' unpaid cancelled orders): both go through every tenant's
orders (``Order.all_tenants``: the purge is no tenant's) in the purge's batches, and differ
only in what is done to a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db.models import Q, QuerySet

from idempotency.purge import OnBatch, in_batches
from ordering.models import Order

Purge = Callable[..., int]


def over_orders(apply: Callable[[QuerySet[Order]], int]) -> Purge:
    """A purge (``tenants.retention.register_kind``'s) that applies ``apply`` to each batch of
    the orders matching ``expired(now)`` (at most ``max_batches``), ``apply`` counting the
    orders it changed; it returns how many in all."""

    def purge(
        model: type[Order],
        expired: Callable[[datetime], Q],
        *,
        max_batches: int | None = None,
        on_batch: OnBatch | None = None,
    ) -> int:
        return in_batches(
            model.all_tenants, expired, apply=apply, max_batches=max_batches, on_batch=on_batch
        )

    return purge
