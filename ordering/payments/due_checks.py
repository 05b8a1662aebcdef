"""Which pending payments are due to be asked about at their provider, and how late the
oldest is. Queries only (no provider, no callback code), so the metrics view can read them
(:mod:`ordering.payments.reconciliation` does the asking)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from ordering.models import Payment


def due_payments(now: datetime) -> QuerySet[Payment]:
    """Pending payments whose check is due (``due_at``, annotated), the longest due first."""
    after = timedelta(seconds=settings.PAYMENT_RECONCILE_AFTER_SECONDS)
    recheck = timedelta(seconds=settings.PAYMENT_RECONCILE_RECHECK_SECONDS)
    return (
        Payment.all_tenants.filter(
            status=Payment.Status.PENDING,
            created_at__lte=now - after,
            created_at__gte=now - timedelta(seconds=settings.PAYMENT_RECONCILE_MAX_AGE_SECONDS),
        )
        .filter(Q(checked_at__isnull=True) | Q(checked_at__lte=now - recheck))
        .annotate(
            due_at=Coalesce(
                F("checked_at") + recheck,
                F("created_at") + after,
                output_field=DateTimeField(),
            )
        )
        .order_by("due_at", "pk")
    )


def overdue_seconds(now: datetime | None = None) -> float:
    """How late the oldest due check is (0 when none is). While reconciliation runs and the
    provider answers, this stays under a beat interval or so."""
    now = now or timezone.now()
    due_at = due_payments(now).values_list("due_at", flat=True).first()
    return 0.0 if due_at is None else max(0.0, (now - due_at).total_seconds())
