"""A capture the provider reports after the restaurant left is refunded by the platform.

An offboarding closes the restaurant's tables (:mod:`ordering.privacy.offboarding`) once no
payment of it awaits the provider, then deletes them. A provider may still report a capture
of a payment our side had voided or seen declined (a late capture, which providers do send):
the fence refused the webhook's writes (403), and once the rows were deleted it named no
payment (404); the diner's money stayed taken and nobody saw it.

So, in the transaction that closes the tables, :func:`record_departed_payments` copies each
payment of the restaurant that could still be captured (failed or voided, started within
``DEPARTED_PAYMENT_RETENTION_DAYS``) into :class:`~ordering.models.DepartedPayment`, a
platform table neither fenced nor deleted with the restaurant. The webhook, for an authentic
event whose payment is gone or fenced, asks :func:`apply_departed_event`:

- a success matching a row is a ``paid_after_offboarding`` conflict: the capture is recorded
  on the row (locked, so of concurrent deliveries one records it and the others are
  duplicates) and the platform's refund of the amount captured is scheduled
  (:mod:`ordering.payments.departed_refunds`), once, whatever event id repeats it;
- a decline matching a row changes nothing (``ignored``): nothing was taken;
- an event matching no row is not ours (the caller answers 404 as for any unknown payment).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from idempotency.purge import delete_in_batches
from ordering.models import DepartedPayment, Payment, PaymentCallback
from ordering.payments.base import CallbackEvent
from ordering.payments.departed_refunds import schedule_departed_refund
from tenants.retention import register_kind

logger = logging.getLogger(__name__)

CONFLICT_KIND = "paid_after_offboarding"
CONFLICT_LABEL = "Captured after the restaurant left the platform"
# a payment in one of these may still be captured late; one pending holds the tables open
CAPTURABLE = (Payment.Status.FAILED, Payment.Status.VOIDED)
Outcome = PaymentCallback.Outcome
RETENTION_KIND = "departed_payments"
_BATCH = 1000


@dataclass(frozen=True)
class DepartedDecision:
    """What an event about a departed restaurant's payment came to, for the webhook's
    answer and audit."""

    outcome: str
    audit: str  # the duplicate-hit audit's outcome: HIT or CONFLICT
    reason: str
    tenant_id: int
    order_id: int
    order_status: str
    conflict: str | None = None


def record_departed_payments(*, tenant_id: int, tenant_slug: str) -> int:
    """Copy the tenant's payments that could still be captured into the platform's table;
    how many of the tenant's it holds now. Call it in the transaction that closes the
    tenant's tables (its row locked: no payment of it changes meanwhile). Repeating it adds
    nothing twice."""
    cutoff = timezone.now() - timedelta(days=settings.DEPARTED_PAYMENT_RETENTION_DAYS)
    payments = (
        Payment.all_tenants.filter(
            tenant_id=tenant_id, status__in=CAPTURABLE, created_at__gte=cutoff
        )
        .order_by("pk")
        .values_list(
            "provider",
            "provider_txn_id",
            "order_id",
            "order__status",
            "status",
            "amount",
            "currency",
        )
    )
    now = timezone.now()
    rows = [
        DepartedPayment(
            provider=provider,
            provider_txn_id=txn_id,
            order_ref=order_id,
            order_status=order_status,
            payment_status=status,
            amount=amount,
            currency=currency,
            tenant_ref=tenant_id,
            tenant_slug=tenant_slug,
            recorded_at=now,
        )
        for provider, txn_id, order_id, order_status, status, amount, currency in payments.iterator(
            chunk_size=_BATCH
        )
    ]
    DepartedPayment.objects.bulk_create(rows, batch_size=_BATCH, ignore_conflicts=True)
    return DepartedPayment.objects.filter(tenant_ref=tenant_id).count()


def apply_departed_event(*, provider: str, event: CallbackEvent) -> DepartedDecision | None:
    """In the caller's transaction: apply an authentic event whose payment is gone or fenced
    to the departed payment it names; None if it names none (not ours)."""
    row = (
        DepartedPayment.objects.select_for_update()
        .filter(provider=provider, provider_txn_id=event.provider_txn_id, order_ref=event.order_id)
        .first()
    )
    if row is None:
        return None
    if event.status == "failed":
        return _decision(row, Outcome.IGNORED, "HIT", "restaurant_left")
    if row.captured_at is not None:
        return _decision(row, Outcome.DUPLICATE, "HIT", "capture_already_recorded")
    DepartedPayment.objects.filter(pk=row.pk).update(
        capture_event_id=event.event_id,
        captured_at=Now(),
        captured_amount=event.amount,
        captured_currency=event.currency,
        refund=DepartedPayment.Refund.PENDING,
        updated_at=Now(),
    )
    schedule_departed_refund(departed_id=row.pk)
    logger.warning(
        "payment %s:%s of %s captured after the restaurant left (%s %s): the platform refunds it",
        provider,
        event.provider_txn_id,
        row.tenant_slug,
        event.amount,
        event.currency,
    )
    return _decision(row, Outcome.CONFLICT, "CONFLICT", CONFLICT_KIND, conflict=CONFLICT_KIND)


def _decision(
    row: DepartedPayment, outcome: str, audit: str, reason: str, *, conflict: str | None = None
) -> DepartedDecision:
    return DepartedDecision(
        outcome=outcome,
        audit=audit,
        reason=reason,
        tenant_id=row.tenant_ref,
        order_id=row.order_ref,
        order_status=row.order_status,
        conflict=conflict,
    )


def departed_payments_past_retention(now: datetime) -> Q:
    """Rows unchanged for ``DEPARTED_PAYMENT_RETENTION_DAYS``, but for a refund still to run
    or failed for good (its dead letter waits for staff): the retention purge deletes them."""
    cutoff = now - timedelta(days=settings.DEPARTED_PAYMENT_RETENTION_DAYS)
    return Q(updated_at__lt=cutoff) & ~Q(refund__in=DepartedPayment.KEPT_WHILE)


def register() -> None:
    """Make the retention purge delete them (from the ordering app's ``ready()``)."""
    register_kind(
        RETENTION_KIND, DepartedPayment, departed_payments_past_retention, delete_in_batches
    )
