"""Orders left unpaid give their portions back.

An order takes its dishes' stock when it is placed. A diner who never pays (the app closed, the
card forgotten or declined) would otherwise hold those portions for good, and the menu shows
them sold out. So the platform cancels, as the diner could have, an order still CREATED
``UNPAID_ORDER_EXPIRY_SECONDS`` after it was placed (30 minutes; 0 turns this off), and an
order in PAYING whose every payment was declined that long ago: stock and coupon back, logged
as ``platform:unpaid-expiry``.

A payment still pending is the provider's to settle (:mod:`ordering.payments.reconciliation`
asks it), so its order is left alone for longer: ``PENDING_PAYMENT_EXPIRY_SECONDS`` (6 hours;
0: never) after the payment started, and only once reconciliation has asked the provider and
it had nothing settled. Then the order is cancelled the same way and the payment voided. No
money is lost either way: a payment the provider takes after all, like any declined one found
paid by reconciliation or a late callback, is money no order wanted, and the platform refunds
it (:mod:`ordering.payments.capture_refunds`). Runs from Celery beat every
``UNPAID_ORDER_EXPIRY_SWEEP_SECONDS``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from ordering.models import Order, OrderStatus, Payment
from ordering.services.lifecycle import expire_unpaid_order
from tenants.models import Tenant
from tenants.write_fence import writable

logger = logging.getLogger(__name__)

# a time no decline is before: the ``declined_before`` that expires no declined order
NO_DECLINE_OLD_ENOUGH = datetime.min.replace(tzinfo=UTC)


def expire_unpaid_orders(*, batch: int = 500, now: datetime | None = None) -> int:
    """Cancel every order left unpaid past the window, oldest first, ``batch`` at a time; how
    many. An order the diner starts paying (or pays) meanwhile is left as it is.

    A run goes on until no order is due, not for one batch: whoever holds a restaurant's
    public key may leave unpaid orders faster than a batch a run, and a run that stopped
    after one fell further behind every minute, while every other restaurant's overdue
    orders waited behind that backlog, holding their portions long past the window. Each
    batch starts after the last order the previous one chose, so orders that cannot be
    expired are not chosen again in the same run. A run longer than the beat's period
    overlaps the next one harmlessly (each expiry is a conditional update)."""
    now = now or timezone.now()
    window = settings.UNPAID_ORDER_EXPIRY_SECONDS
    kinds: list[QuerySet[Order]] = []
    cutoff = None
    if window > 0:
        cutoff = now - timedelta(seconds=window)
        kinds.append(Order.all_tenants.filter(status=OrderStatus.CREATED, created_at__lt=cutoff))
        kinds.append(_declined(cutoff))
    pending_started_before = None
    if settings.PENDING_PAYMENT_EXPIRY_SECONDS > 0:
        pending_started_before = now - timedelta(seconds=settings.PENDING_PAYMENT_EXPIRY_SECONDS)
        kinds.append(_stalled(pending_started_before))
    # With the window off no declined order is expired: one chosen for its stalled payment
    # that the provider declines before the sweep reaches it is left to the diner to pay
    # again (``declined_before`` None would expire it, however recent the decline).
    declined_before = cutoff if cutoff is not None else NO_DECLINE_OLD_ENOUGH
    expired = 0
    for orders in kinds:
        after: tuple[datetime, int] | None = None
        while True:
            chosen = orders.filter(writable())
            if after is not None:
                chosen = chosen.filter(
                    Q(created_at__gt=after[0]) | Q(created_at=after[0], pk__gt=after[1])
                )
            due = list(
                chosen.order_by("created_at", "pk").values_list("tenant_id", "pk", "created_at")[
                    :batch
                ]
            )
            expired += _expire(
                [(tenant_id, order_id) for tenant_id, order_id, _ in due],
                pending_started_before=pending_started_before,
                declined_before=declined_before,
            )
            if len(due) < batch:
                break
            after = (due[-1][2], due[-1][1])
    return expired


def _expire(
    due: list[tuple[int, int]],
    *,
    pending_started_before: datetime | None,
    declined_before: datetime,
) -> int:
    """Expire the ``(tenant id, order id)`` chosen; how many were."""
    tenants = Tenant.objects.in_bulk({tenant_id for tenant_id, _ in due})
    expired = 0
    for tenant_id, order_id in due:
        if tenant_id not in tenants:  # offboarded meanwhile
            continue
        try:
            expired += expire_unpaid_order(
                tenant=tenants[tenant_id],
                order_id=order_id,
                pending_started_before=pending_started_before,
                declined_before=declined_before,
            )
        except Exception:  # this order alone: the others are still expired
            logger.exception("order %s could not be expired", order_id)
    return expired


def _declined(cutoff: datetime) -> QuerySet[Order]:
    """PAYING orders whose payments were all declined, the last before ``cutoff``."""
    payments = Payment.all_tenants.filter(order=OuterRef("pk"))
    return Order.all_tenants.filter(
        Exists(payments),
        ~Exists(payments.exclude(status=Payment.Status.FAILED)),
        ~Exists(payments.filter(updated_at__gte=cutoff)),
        status=OrderStatus.PAYING,
        updated_at__lt=cutoff,
    )


def _stalled(started_before: datetime) -> QuerySet[Order]:
    """PAYING orders whose pending payment started before ``started_before`` and was asked
    about at the provider, which had nothing settled (else it would not be pending)."""
    payments = Payment.all_tenants.filter(order=OuterRef("pk"))
    return Order.all_tenants.filter(
        Exists(
            payments.filter(
                status=Payment.Status.PENDING,
                created_at__lt=started_before,
                checked_at__isnull=False,
            )
        ),
        status=OrderStatus.PAYING,
    )
