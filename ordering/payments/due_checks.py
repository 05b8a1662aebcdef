"""Which payments are due to be asked about at their provider, and how late or unanswered the
checks are. Queries only (no provider, no callback code), so the metrics view can read them
(:mod:`ordering.payments.reconciliation` does the asking).

A payment is asked about while the provider could still have news of it that we have not
heard: it is not settled on our side (pending; failed, as a declined card may be followed by
one that pays; voided, as a diner may pay after the order was cancelled), no success event of
it for its own amount and currency has reached us (one reporting another amount is a conflict
for staff that leaves it pending: the provider's own record says what it took), and it is
younger than ``PAYMENT_RECONCILE_MAX_AGE_SECONDS`` (and not a tenant's being offboarded: its
rows cannot be written, :func:`tenants.write_fence.writable`). The first
check is ``PAYMENT_RECONCILE_AFTER_SECONDS`` after it started; each answer puts the next one
off by the payment's age (at least ``PAYMENT_RECONCILE_RECHECK_SECONDS``), so a payment is
asked about some ten times in a week, not two thousand; an unanswered ask puts it off by
``PAYMENT_RECONCILE_RECHECK_SECONDS``, behind the others that are due.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, Exists, F, Min, OuterRef, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from ordering.models import Payment, PaymentCallback
from tenants.write_fence import writable

# Our side of a payment the provider may still settle (succeeded and refunded are final).
OPEN_ON_OUR_SIDE = (Payment.Status.PENDING, Payment.Status.FAILED, Payment.Status.VOIDED)


def reconcilable(now: datetime) -> QuerySet[Payment]:
    """Payments that are asked about, due or not (``due_at`` annotated)."""
    after = timedelta(seconds=settings.PAYMENT_RECONCILE_AFTER_SECONDS)
    success_heard = PaymentCallback.all_tenants.filter(
        payment=OuterRef("pk"),
        status="succeeded",
        amount=OuterRef("amount"),
        currency=OuterRef("currency"),
    )
    return (
        Payment.all_tenants.filter(
            writable(),
            status__in=OPEN_ON_OUR_SIDE,
            created_at__gte=now - timedelta(seconds=settings.PAYMENT_RECONCILE_MAX_AGE_SECONDS),
        )
        .exclude(Exists(success_heard))
        .annotate(
            due_at=Coalesce(
                F("next_check_at"), F("created_at") + after, output_field=DateTimeField()
            )
        )
    )


def due_payments(now: datetime) -> QuerySet[Payment]:
    """The payments whose check is due, the longest due first."""
    return reconcilable(now).filter(due_at__lte=now).order_by("due_at", "pk")


def next_check(*, payment: Payment, now: datetime, answered: bool) -> datetime:
    """When to ask again: after the payment's age once answered, soon when not."""
    recheck = timedelta(seconds=settings.PAYMENT_RECONCILE_RECHECK_SECONDS)
    return now + (max(recheck, now - payment.created_at) if answered else recheck)


def overdue_seconds(now: datetime | None = None) -> float:
    """How late the oldest due check is (0 when none is): reconciliation not running, or not
    keeping up. While it runs, this stays under a beat interval or so."""
    now = now or timezone.now()
    due_at = due_payments(now).values_list("due_at", flat=True).first()
    return 0.0 if due_at is None else max(0.0, (now - due_at).total_seconds())


def unanswered_seconds(now: datetime | None = None) -> float:
    """How long the provider has left a payment's check unanswered, the longest (0: none)."""
    now = now or timezone.now()
    since = reconcilable(now).aggregate(since=Min("unanswered_since"))["since"]
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())
