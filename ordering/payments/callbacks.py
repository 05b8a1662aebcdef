"""The payment webhook: authenticate, dedupe, and apply each provider event at most once.

Order of checks, and why:

1. provider known, signature and timestamp valid (:mod:`ordering.payments.signatures`) — before
   anything is parsed or written, so a forged or replayed request leaves no trace but a 4xx;
2. body well-formed, and it names a payment we started — else 400 / 404, nothing written
   (a payment of a restaurant that left, which the platform kept when its tables closed, is
   one: :mod:`ordering.payments.departed` applies such an event);
3. in one transaction: the order and the payment are read and locked in one statement (the
   order first, then the payment: the order ``cancel_order`` takes them in, so the two cannot
   deadlock). Every other delivery about this payment waits there until this one commits,
   then reads what it committed. What the event means is decided from that state, and the
   event goes into the inbox (``PaymentCallback``, unique per provider event id) with that
   decision (:mod:`ordering.payments.inbox`): an event id received before inserts nothing,
   and is a duplicate when it was received saying the same, else an ``event_id_reused``
   conflict (nothing applied). Only then is the decision carried out: PAYING -> PAID only
   through the conditional FSM transition, with the ``order.paid`` outbox event in the same
   transaction.

Every authentic callback answers 200 with a ``result``: ``applied``; ``duplicate`` (seen before,
nothing changed); ``ignored`` (late or out of order, nothing changed); ``conflict`` (it contradicts
the order — wrong amount, money captured for a cancelled order, an event id the provider
used before for another event — recorded as a
``ProviderConflict`` for staff, nothing changed). A 2xx is what makes the provider stop retrying;
none of these would be different on a retry. Duplicates, late events and conflicts are also
written to the duplicate-hit audit (``idempotency.models.DuplicateAudit``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from enum import Enum

from django.conf import settings
from django.db import DatabaseError, router, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.urls import reverse
from django.utils import timezone

from idempotency import metrics
from idempotency.audit import MISS, AuditEvent
from idempotency.core.hashing import keyed_digest
from idempotency.stores.audit_stream import report
from ordering.background.outbox import emit_event
from ordering.models import (
    EventType,
    Order,
    OrderStatus,
    Payment,
    PaymentCallback,
    ProviderConflict,
)
from ordering.payments.base import CallbackEvent, CallbackPayloadInvalid
from ordering.payments.capture_refunds import schedule_capture_refund
from ordering.payments.departed import DepartedDecision, apply_departed_event
from ordering.payments.error_codes import CallbackRejected, PaymentErrorCode
from ordering.payments.inbox import record_in_inbox, same_as_received
from ordering.payments.registry import UnknownProvider, get_provider, webhook_secrets
from ordering.payments.signatures import verify
from ordering.prefetch import JoinedRead
from ordering.services.lifecycle import apply_transition, cancel_unpaid
from tenants.models import Tenant
from tenants.write_fence import refused_by_fence

# Spelt as the engine labels every other request, its method and URLconf route (no leading
# slash), so /metrics, the durable counters and the audits hold one name per route.
AUDIT_ENDPOINT = "POST api/v1/payments/callback/"
Outcome = PaymentCallback.Outcome
P = Payment.Status
CANCELLED_OR_CANCELLING = (OrderStatus.CANCELLED, OrderStatus.CANCELLING)
# an order in one of these was paid: only a payment's success moves it out of PAYING onwards
PAID_STATUSES = tuple(
    status
    for status in OrderStatus.values
    if status not in (OrderStatus.CREATED, OrderStatus.PAYING, *CANCELLED_OR_CANCELLING)
)


@dataclass(frozen=True)
class CallbackResult:
    outcome: str
    order_id: int
    order_status: str
    conflict: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "result": self.outcome,
            "order_id": str(self.order_id),
            "order_status": self.order_status,
            "conflict": self.conflict,
        }


class _Effect(Enum):
    """What an applied event changes."""

    FAIL_PAYMENT = "fail_payment"
    MARK_PAID = "mark_paid"
    CANCEL_ORDER = "cancel_order"  # first: the capture then comes after the order's cancel


@dataclass(frozen=True)
class _Decision:
    outcome: str
    audit: str | None = None  # DuplicateAudit outcome: HIT or CONFLICT
    reason: str = ""
    conflict: str | None = None  # a ProviderConflict of this kind is recorded for staff
    effect: _Effect | None = None


def handle_payment_callback(
    *,
    provider_name: str,
    raw_body: bytes,
    timestamp: str | None,
    signature: str | None,
    now: float | None = None,
) -> CallbackResult:
    """Apply one provider callback; :class:`CallbackRejected` (nothing written) if it is not
    authentic, not well-formed, or about no payment of ours."""
    try:
        provider = get_provider(provider_name)
        secrets = webhook_secrets(provider_name)
    except UnknownProvider:
        raise CallbackRejected(
            PaymentErrorCode.PAYMENT_PROVIDER_UNKNOWN, f"Unknown payment provider {provider_name!r}"
        ) from None
    verify(
        secrets=secrets,
        timestamp=timestamp,
        signature=signature,
        body=raw_body,
        tolerance_seconds=settings.PAYMENT_CALLBACK_TOLERANCE_SECONDS,
        now=now,
    )
    try:
        event = _in_cents(provider.parse_callback(raw_body))
    except CallbackPayloadInvalid as exc:
        raise CallbackRejected(PaymentErrorCode.PAYMENT_CALLBACK_INVALID, str(exc)) from None
    return apply_provider_event(provider=provider.name, event=event)


def apply_provider_event(*, provider: str, event: CallbackEvent) -> CallbackResult:
    """Apply one authentic provider event at most once, however it reached us: a callback, or
    reconciliation asking the provider about a payment whose callback never came
    (:mod:`ordering.payments.reconciliation`). Either way the event goes through the inbox
    under its provider event id, so the other path's copy of it is a duplicate.

    An event about a payment of a restaurant that left (its tables closed: fenced, then
    deleted) is applied to the platform's copy of that payment instead
    (:mod:`ordering.payments.departed`). Should the tables close between this event's read and
    its first write (the fence refuses that write), it is read again, and is such an event."""
    try:
        return _apply(provider=provider, event=event)
    except DatabaseError as exc:
        if not refused_by_fence(exc):
            raise
    return _apply(provider=provider, event=event)


def _apply(*, provider: str, event: CallbackEvent) -> CallbackResult:
    with transaction.atomic():
        found = _locked(event=event, provider=provider)
        if found is None or found[0].tenant.status == Tenant.Status.OFFBOARDING:
            departed = apply_departed_event(provider=provider, event=event)
            if departed is not None:
                return _departed_result(departed, provider=provider, event=event)
        if found is None:
            raise CallbackRejected(
                PaymentErrorCode.PAYMENT_NOT_FOUND, "No such payment for this order"
            )
        order, payment = found
        decision = _decide(order=order, payment=payment, event=event)
        received = record_in_inbox(
            order=order,
            payment=payment,
            event=event,
            provider=provider,
            outcome=decision.outcome,
        )
        if not received:
            decision = _received_before(
                order=order, payment=payment, event=event, provider=provider
            )
        if received or decision.conflict is not None:
            _carry_out(decision, order=order, payment=payment, event=event, provider=provider)
        if decision.audit:
            # in this transaction: the audit exists exactly when the decision committed
            _audit(
                tenant_id=order.tenant_id,
                order_id=order.pk,
                event=event,
                provider=provider,
                outcome=decision.audit,
                reason=decision.reason,
            )
        else:
            _count_first_delivery(order=order, provider=provider)
    return CallbackResult(
        outcome=decision.outcome,
        order_id=order.pk,
        order_status=order.status,
        conflict=decision.conflict,
    )


def _in_cents(event: CallbackEvent) -> CallbackEvent:
    """``event`` with its amount written as the inbox's column holds it (``numeric(12, 2)``),
    however many digits the provider wrote it with (``8.5``, ``8.50``, or ``8.50`` and 20,000
    zeros): written as received, such zeros went past the digits PostgreSQL's numeric keeps
    after the point, and the inbox's insert failed, a 500 on every delivery (and the audit of
    a redelivery kept the amount's 20,000 digits). An amount the column cannot hold (10^10 or
    more, or a fraction of a cent) is no payment of ours either, whose amounts are the same
    kind of column: the body is refused as malformed, whatever the provider's own bounds let
    through."""
    field = PaymentCallback._meta.get_field("amount")
    whole_digits = field.max_digits - field.decimal_places
    if event.amount.adjusted() >= whole_digits:
        raise CallbackPayloadInvalid(f"amount out of range (under 10^{whole_digits})")
    cents = event.amount.quantize(Decimal(1).scaleb(-field.decimal_places))
    if cents != event.amount:
        raise CallbackPayloadInvalid("amount must be a whole number of cents")
    return replace(event, amount=cents)


# per database alias: the callback's locked read, compiled once
_LOCKED_READS: dict[str, JoinedRead] = {}


def _locked(*, event: CallbackEvent, provider: str) -> tuple[Order, Payment] | None:
    """The order the event names and its payment at ``provider`` (with the order's tenant),
    both locked for this transaction, the order first; None if there is no such payment of
    that order.

    One statement (``SELECT … FOR UPDATE OF`` the order, then the payment): reading both,
    then locking each again, took four round trips and four queries built by the ORM. Its
    text is compiled once per process (:class:`ordering.prefetch.JoinedRead`): the ORM's
    building of this three-table query cost the worker about 1.4 ms a callback."""
    using = router.db_for_write(Payment)
    params: list[object] = [event.order_id, provider, event.provider_txn_id]
    read = _LOCKED_READS.get(using)
    if read is None:
        read = JoinedRead.of(_locking_read(*params), params, using=using)
        if read is not None:
            _LOCKED_READS[using] = read
    if read is not None:
        payment = read.first(params, using=using)
    else:
        payment = next(iter(_locking_read(*params)), None)
    return None if payment is None else (payment.order, payment)


def _locking_read(order_id: object, provider: object, provider_txn_id: object) -> QuerySet:
    return (
        Payment.all_tenants.select_related("order__tenant")
        .select_for_update(of=("order", "self"))
        .filter(
            order_id=order_id,
            provider=provider,
            provider_txn_id=provider_txn_id,
            tenant=F("order__tenant"),
        )
        .order_by("pk")[:1]
    )


def _decide(*, order: Order, payment: Payment, event: CallbackEvent) -> _Decision:
    """What the event means given the payment's and order's state (both locked); nothing is
    written here (:func:`_carry_out` writes it once the inbox took the event)."""
    if event.status == "failed":
        if payment.status == P.PENDING:
            return _Decision(Outcome.APPLIED, effect=_Effect.FAIL_PAYMENT)
        if payment.status == P.FAILED:
            return _Decision(Outcome.DUPLICATE, audit="HIT", reason="already_failed")
        if payment.status == P.VOIDED:
            return _Decision(Outcome.IGNORED, audit="HIT", reason="payment_voided")
        return _Decision(Outcome.IGNORED, audit="CONFLICT", reason="failed_after_succeeded")
    if (event.amount, event.currency) != (payment.amount, payment.currency):
        return _once_per_payment(ProviderConflict.Kind.AMOUNT_MISMATCH, payment)
    if payment.status in (P.SUCCEEDED, P.REFUNDED):
        return _Decision(Outcome.DUPLICATE, audit="HIT", reason="already_succeeded")
    if order.status in CANCELLED_OR_CANCELLING:
        return _once_per_payment(ProviderConflict.Kind.PAID_AFTER_CANCEL, payment)
    if order.status in PAID_STATUSES:  # paid again after a decline, and both took the money
        return _once_per_payment(ProviderConflict.Kind.PAID_TWICE, payment)
    if payment.status == P.VOIDED or order.status != OrderStatus.PAYING:
        return _conflict(ProviderConflict.Kind.UNEXPECTED_STATE)
    if order.tenant.status != Tenant.Status.ACTIVE:
        # The restaurant is suspended (by staff, or as its offboarding waits for the payments
        # under way): its dashboard and keys are closed, so nobody would make the food, and an
        # offboarding would delete the order PAID with the diner's money. The order is
        # cancelled and the capture is money taken after the cancel, refunded by the platform.
        return replace(
            _conflict(ProviderConflict.Kind.PAID_AFTER_CANCEL),
            reason="restaurant_suspended",
            effect=_Effect.CANCEL_ORDER,
        )
    return _Decision(Outcome.APPLIED, effect=_Effect.MARK_PAID)


def _received_before(
    *, order: Order, payment: Payment, event: CallbackEvent, provider: str
) -> _Decision:
    """The event's id is in the inbox already: a duplicate when it was received saying what
    ``event`` says; else the provider used the id for another event (its bug, or its test mode
    mixed with its live one), which is not applied (the id is taken) nor dropped as a
    duplicate (a capture lost without a trace): an ``event_id_reused`` conflict for staff,
    recorded once per event. Its redeliveries name this payment, locked by this transaction,
    so they wait for it and find its conflict."""
    if same_as_received(order=order, payment=payment, event=event, provider=provider):
        return _Decision(Outcome.DUPLICATE, audit="HIT", reason="event_already_received")
    recorded = ProviderConflict.all_tenants.filter(
        tenant=order.tenant_id,
        provider=provider,
        event_id=event.event_id,
        kind=ProviderConflict.Kind.EVENT_ID_REUSED,
        payment=payment,
        provider_txn_id=event.provider_txn_id,
        reported_status=event.status,
        reported_amount=event.amount,
        reported_currency=event.currency,
    )
    if recorded.exists():
        return _Decision(Outcome.DUPLICATE, audit="HIT", reason="conflict_already_recorded")
    return _conflict(ProviderConflict.Kind.EVENT_ID_REUSED)


def _once_per_payment(kind: str, payment: Payment) -> _Decision:
    """Money taken that the order did not want (cancelled, or paid by another payment), or
    reported with another amount: a conflict, once per payment and kind. The provider may
    report the same capture again under another event id (a second event, reconciliation's
    answer): that is a duplicate, not a second conflict to refund a second time. Money the
    order did not want is one kind for this: a capture reported as paid twice, then again
    once the order was cancelled, is the same money."""
    kinds = (
        ProviderConflict.REFUNDED_BY_PLATFORM
        if kind in ProviderConflict.REFUNDED_BY_PLATFORM
        else {kind}
    )
    if ProviderConflict.all_tenants.filter(payment=payment, kind__in=kinds).exists():
        return _Decision(Outcome.DUPLICATE, audit="HIT", reason="conflict_already_recorded")
    return _conflict(kind)


def _conflict(kind: str) -> _Decision:
    return _Decision(Outcome.CONFLICT, audit="CONFLICT", reason=kind, conflict=kind)


def _carry_out(
    decision: _Decision, *, order: Order, payment: Payment, event: CallbackEvent, provider: str
) -> None:
    """Write what ``decision`` says: the conflict (and, for money the order did not want, the
    platform's refund of it), the failed payment, or the payment captured and the order PAID
    with its outbox event; or, for a suspended restaurant, the order cancelled first."""
    if decision.effect is _Effect.CANCEL_ORDER:
        cancel_unpaid(order, actor=f"provider:{provider}")
    if decision.conflict is not None:
        ProviderConflict.objects.for_tenant(order.tenant).create(
            tenant=order.tenant,
            order=order,
            payment=payment,
            provider=provider,
            provider_txn_id=event.provider_txn_id,
            event_id=event.event_id,
            kind=decision.conflict,
            expected_amount=payment.amount,
            expected_currency=payment.currency,
            reported_amount=event.amount,
            reported_currency=event.currency,
            reported_status=event.status,
        )
        if decision.conflict in ProviderConflict.REFUNDED_BY_PLATFORM and not (
            ProviderConflict.all_tenants.filter(
                payment=payment, kind=ProviderConflict.Kind.AMOUNT_MISMATCH
            ).exists()
        ):
            # (the provider reported another amount for this money before: staff, who see
            # both, decide what to give back; refunded here too, it could go back twice)
            schedule_capture_refund(order=order, payment=payment)
    if decision.effect is _Effect.FAIL_PAYMENT:
        Payment.all_tenants.filter(pk=payment.pk, status=P.PENDING).update(
            status=P.FAILED,
            updated_at=timezone.now(),  # when it was declined: ordering/expiry.py
        )
    elif decision.effect is _Effect.MARK_PAID:
        # this payment captured; in the same statement, one the diner started after this one
        # was declined, still pending, is voided: its success would take the money twice
        # (then a ``paid_twice`` conflict, refunded by the platform)
        Payment.all_tenants.filter(
            Q(pk=payment.pk, status__in=[P.PENDING, P.FAILED]) | Q(order=order, status=P.PENDING)
        ).update(status=Case(When(pk=payment.pk, then=Value(P.SUCCEEDED)), default=Value(P.VOIDED)))
        apply_transition(order, order.mark_paid, actor=f"provider:{provider}")
        emit_event(
            order=order,
            event_type=EventType.ORDER_PAID,
            payload={
                "payment_id": payment.pk,
                "provider": provider,
                "provider_txn_id": payment.provider_txn_id,
                "amount": str(payment.amount),
                "currency": payment.currency,
            },
        )


def _count_first_delivery(*, order: Order, provider: str) -> None:
    """Once the transaction commits, count the event's first delivery (MISS) as the engine
    counts a request that ran: in ``idempotency_outcomes_total`` and the durable counters
    (batched, no audit row). Without it the provider's repeats (HIT) had no first executions
    beside them, and the hit rate read a provider delivering each event twice as all repeats."""
    tenant = str(order.tenant_id)
    first = AuditEvent(
        tenant_key=tenant,
        endpoint=AUDIT_ENDPOINT,
        key="",  # a first execution is only counted: no row keeps its key
        outcome=MISS,
        source="database",
        principal=f"provider:{provider}",
    )

    def count() -> None:
        metrics.count(tenant=tenant, endpoint=AUDIT_ENDPOINT, outcome=MISS)
        report(first)

    transaction.on_commit(count)


def _departed_result(
    departed: DepartedDecision, *, provider: str, event: CallbackEvent
) -> CallbackResult:
    """Audit what an event about a departed restaurant's payment came to (under that
    restaurant's key, as its other callbacks were), and answer it."""
    _audit(
        tenant_id=departed.tenant_id,
        order_id=departed.order_id,
        event=event,
        provider=provider,
        outcome=departed.audit,
        reason=departed.reason,
    )
    return CallbackResult(
        outcome=departed.outcome,
        order_id=departed.order_id,
        order_status=departed.order_status,
        conflict=departed.conflict,
    )


def _audit(
    *,
    tenant_id: int,
    order_id: int,
    event: CallbackEvent,
    provider: str,
    outcome: str,
    reason: str,
) -> None:
    """Audit the duplicate or conflict in the caller's transaction and, once that commits,
    count it in ``idempotency_outcomes_total`` as the engine counts the API's (it was audited
    only, so /metrics never showed a provider's repeats or conflicting reports)."""
    tenant = str(tenant_id)
    transaction.on_commit(
        lambda: metrics.count(tenant=tenant, endpoint=AUDIT_ENDPOINT, outcome=outcome)
    )
    report(
        AuditEvent(
            tenant_key=tenant,
            endpoint=AUDIT_ENDPOINT,
            key=keyed_digest(f"{provider}:{event.event_id}"),
            outcome=outcome,
            source="database",
            principal=f"provider:{provider}",
            request_meta={
                "provider_txn_id": event.provider_txn_id,
                "status": event.status,
                "amount": str(event.amount),
                "currency": event.currency,
                "reason": reason,
            },
            # the order's URL, as the API's own audits name it (the admin's search matches it)
            resource_ref=reverse("order-detail", kwargs={"order_id": order_id}),
        ),
        in_transaction=True,
    )


__all__ = ["CallbackResult", "handle_payment_callback"]
