"""Payments whose callback never came: ask the provider, and apply what it says once.

A provider's callback can be lost for good: our server down through all of the provider's
retries, a webhook URL misconfigured, an event the provider dropped. The diner has paid, but the
order stays PAYING and the kitchen never sees it. So a payment still pending
``PAYMENT_RECONCILE_AFTER_SECONDS`` after it started is asked about
(:meth:`ordering.payments.base.PaymentProvider.settled_event`) at most every
``PAYMENT_RECONCILE_RECHECK_SECONDS``, for ``PAYMENT_RECONCILE_MAX_AGE_SECONDS`` (a provider
expires an open payment long before). An answer goes through the same path as a callback
(:func:`ordering.payments.callbacks.apply_provider_event`), under the provider's own event id:
whichever of the two arrives second is a duplicate in the inbox, so the order is paid once.

Runs from Celery beat every ``PAYMENT_RECONCILE_SECONDS`` and as
``manage.py reconcile_payments``. ``ordering_payments_reconcile_overdue_seconds``
(:mod:`ordering.payments.due_checks`, read by :mod:`ordering.metrics`) says how late the
oldest due check is, for an alert.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from django.utils import timezone

from ordering.models import Payment
from ordering.payments.base import ProviderError
from ordering.payments.callbacks import apply_provider_event
from ordering.payments.due_checks import due_payments
from ordering.payments.error_codes import CallbackRejected
from ordering.payments.registry import UnknownProvider, get_provider

logger = logging.getLogger(__name__)


def reconcile_payments(*, batch: int = 200, now: datetime | None = None) -> dict[str, int]:
    """Ask the provider about up to ``batch`` due payments; counts by what came of each:
    ``open`` (not settled yet), ``unreachable`` (the provider could not be asked), or the
    result of applying its answer (``applied``, ``duplicate``, ``ignored``, ``conflict``)."""
    now = now or timezone.now()
    counts: Counter[str] = Counter()
    for payment in due_payments(now)[:batch]:
        try:
            event = get_provider(payment.provider).settled_event(payment=payment)
        except (ProviderError, UnknownProvider) as exc:
            logger.warning("payment %s: provider not asked: %s", payment.pk, exc)
            counts["unreachable"] += 1
            continue
        Payment.all_tenants.filter(pk=payment.pk).update(checked_at=now)
        if event is None:
            counts["open"] += 1
            continue
        try:
            result = apply_provider_event(provider=payment.provider, event=event)
        except CallbackRejected as exc:  # the provider named another order: nothing applied
            logger.warning("payment %s: provider's answer refused: %s", payment.pk, exc.detail)
            counts["refused"] += 1
            continue
        if result.outcome != "duplicate":
            logger.info("payment %s reconciled: %s", payment.pk, result.outcome)
        counts[result.outcome] += 1
    return dict(counts)
