"""Payments whose callback never came: ask the provider, and apply what it says once.

A provider's callback can be lost for good: our server down through all of the provider's
retries, a webhook URL misconfigured, an event the provider dropped. The diner has paid, but the
order stays PAYING and the kitchen never sees it; or the diner paid after a declined card, or
after the order was cancelled. So the payments the provider may still have news of are asked
about (:meth:`ordering.payments.base.PaymentProvider.settled_event`) on the schedule
:mod:`ordering.payments.due_checks` sets. An answer goes through the same path as a callback
(:func:`ordering.payments.callbacks.apply_provider_event`), under the provider's own event id:
whichever of the two arrives second is a duplicate in the inbox, so the order is paid once (and
money taken for a cancelled order is refunded: :mod:`ordering.payments.capture_refunds`).

Runs from Celery beat every ``PAYMENT_RECONCILE_SECONDS`` and as ``manage.py
reconcile_payments``. ``ordering_payments_reconcile_overdue_seconds`` (how late the oldest due
check is) and ``ordering_payments_unanswered_seconds`` (how long the provider has left one
unanswered) are read by :mod:`ordering.metrics`, for alerts.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ordering.models import Payment
from ordering.payments.base import CallbackEvent
from ordering.payments.callbacks import apply_provider_event
from ordering.payments.due_checks import due_payments, next_check
from ordering.payments.error_codes import CallbackRejected
from ordering.payments.registry import get_provider
from tenants.write_fence import refused_by_fence

logger = logging.getLogger(__name__)


def reconcile_payments(*, batch: int | None = None, now: datetime | None = None) -> dict[str, int]:
    """Ask the provider about up to ``batch`` (``PAYMENT_RECONCILE_BATCH``) due payments;
    counts by what came of each: ``open`` (nothing settled yet), ``unreachable`` (the provider
    could not be asked, or its adapter failed), ``error`` (its answer could not be applied), or
    the result of applying its answer (``applied``, ``duplicate``, ``ignored``, ``conflict``),
    or ``refused`` (the answer is about another order or payment: nothing applied). Each
    payment's next check is set before its answer is applied, so one that keeps failing goes
    behind the others instead of holding up every run."""
    now = now or timezone.now()
    counts: Counter[str] = Counter()
    for payment in due_payments(now)[: batch or settings.PAYMENT_RECONCILE_BATCH]:
        this = Payment.all_tenants.filter(pk=payment.pk)
        try:
            event = get_provider(payment.provider).settled_event(payment=payment)
        except Exception as exc:  # a provider down, unknown here, or its adapter's bug
            logger.warning("payment %s: provider not asked: %r", payment.pk, exc)
            _note_ask(
                this,
                next_check_at=next_check(payment=payment, now=now, answered=False),
                unanswered_since=Coalesce(F("unanswered_since"), Value(now)),
            )
            counts["unreachable"] += 1
            continue
        _note_ask(
            this,
            checked_at=now,
            next_check_at=next_check(payment=payment, now=now, answered=True),
            unanswered_since=None,
        )
        counts[_apply(payment, event)] += 1
    return dict(counts)


def _note_ask(this: QuerySet[Payment], **fields: object) -> None:
    """Write when the payment is to be asked about next. Its restaurant's offboarding may have
    closed its tables since the run read it (while the provider answered): the fence refuses
    the write, and ended the whole run there, the provider's answer never applied (a capture
    of the payment is then the departed payment's, refunded by the platform) and the other
    payments due not asked. Nothing is to be written then: the tables are closed, and no later
    run reads the payment (:func:`ordering.payments.due_checks.reconcilable`)."""
    try:
        with transaction.atomic():
            this.update(**fields)
    except DatabaseError as exc:
        if not refused_by_fence(exc):
            raise


def _apply(payment: Payment, event: CallbackEvent | None) -> str:
    """What came of the provider's answer, applied through the callback's own path; only an
    answer about the payment asked: one naming another of our payments (a mix-up of the
    provider's, or of its adapter's) was applied to that one, its order PAID with no money
    taken for it, and the asked payment's event id put in the inbox under it."""
    if event is None:
        return "open"
    if (event.order_id, event.provider_txn_id) != (payment.order_id, payment.provider_txn_id):
        logger.warning(
            "payment %s: provider's answer refused: it is about order %s, transaction %s",
            payment.pk,
            event.order_id,
            event.provider_txn_id,
        )
        return "refused"
    try:
        result = apply_provider_event(provider=payment.provider, event=event)
    except CallbackRejected as exc:  # the provider named another order: nothing applied
        logger.warning("payment %s: provider's answer refused: %s", payment.pk, exc.detail)
        return "refused"
    except Exception:
        logger.exception("payment %s: provider's answer not applied", payment.pk)
        return "error"
    if result.outcome != "duplicate":
        logger.info("payment %s reconciled: %s", payment.pk, result.outcome)
    return result.outcome
