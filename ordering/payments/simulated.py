"""The built-in simulated payment provider, for the demo and the tests.

It behaves like a careful real provider: refunds are idempotent on their key (the key sent
again with another amount or payment is refused, not answered with the first refund),
callbacks are signed with the provider's webhook secret and may be delivered several times.
It can also play the provider's side of the webhook: :func:`signed_callback` builds exactly
what the provider would send, and :func:`complete_payment` delivers it to our webhook service
in-process (the ``simulate_payment`` command, and the demo's auto-complete, ``settings.
SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS``).
"""

from __future__ import annotations

import json
import re
import time
from decimal import Decimal
from typing import Any
from uuid import uuid4

from django.conf import settings
from django.db import transaction

from ordering.background import dispatch
from ordering.models import Compensation, Order, Payment, SimulatedOperation
from ordering.payments.base import (
    CallbackEvent,
    CallbackPayloadInvalid,
    CallbackStatus,
    PaymentIntent,
    RefundResult,
)
from ordering.payments.registry import webhook_secrets
from ordering.payments.signatures import (
    PROVIDER_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)
from ordering.simulation import fail_if_planned, hang_if_planned, record_operation

# Matched whole (fullmatch): a pattern ending in ``$`` also matches before a final newline.
_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# ASCII digits only and at most 19 of them: ``str.isdigit`` is also true of "²" and of
# 5,000 digits, which ``int()`` refuses (a 500 once)
_ORDER_ID_RE = re.compile(r"[0-9]{1,19}")
# what the provider's books call each outcome of a payment, the one that wins first
_STATUS_OF: dict[str, CallbackStatus] = {
    SimulatedOperation.Kind.PAYMENT_SUCCEEDED: "succeeded",
    SimulatedOperation.Kind.PAYMENT_FAILED: "failed",
}
_BOOKED = {status: kind for kind, status in _STATUS_OF.items()}
_CURRENCY_RE = re.compile(r"[A-Z]{3}")
# A decimal as JSON writes one, in ASCII: ``Decimal()`` itself also reads "19_00" as 1,900,
# other scripts' digits, and text with spaces or a newline around it. An exponent of more
# digits than this would be out of range anyway, and of 20 ``Decimal()`` refuses.
_AMOUNT_RE = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]{1,4})?")


class SimulatedProvider:
    def __init__(self, *, name: str = "simulated") -> None:
        self.name = name

    def start_payment(self, *, order: Order, amount: Decimal, currency: str) -> PaymentIntent:
        """A new transaction id; with auto-complete on, the provider confirms it by itself
        shortly after the pay transaction commits (as a real provider would, via callback)."""
        txn_id = f"sim_{uuid4().hex}"
        delay = settings.SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS
        if delay > 0:
            transaction.on_commit(
                lambda: dispatch.enqueue_or_run_here(
                    dispatch.COMPLETE_SIMULATED_PAYMENT, self.name, txn_id, countdown=delay
                ),
                robust=True,
            )
        return PaymentIntent(provider_txn_id=txn_id)

    def refund(self, *, payment: Payment, amount: Decimal, idempotency_key: str) -> RefundResult:
        fail_if_planned(order_id=payment.order_id, step=Compensation.Step.REFUND_PAYMENT)
        operation, created = record_operation(
            tenant_id=payment.tenant_id,
            idempotency_key=idempotency_key,
            kind=SimulatedOperation.Kind.REFUND,
            reference=payment.provider_txn_id,
            amount=amount,
        )
        # The refund is done at the provider; a hang here is a slow answer, the window in
        # which a worker can die after the money moved but before it recorded that.
        hang_if_planned(order_id=payment.order_id, step=Compensation.Step.REFUND_PAYMENT)
        return RefundResult(
            refund_id=f"sim_re_{operation.pk}", amount=operation.amount, replayed=not created
        )

    def settled_event(self, *, payment: Payment) -> CallbackEvent | None:
        """From the books :func:`complete_payment` keeps: a payment taken wins over a decline
        (a diner who paid after a declined card has paid)."""
        booked = set(
            SimulatedOperation.objects.filter(
                tenant_id=payment.tenant_id, reference=payment.provider_txn_id, kind__in=_STATUS_OF
            ).values_list("kind", flat=True)
        )
        for kind, status in _STATUS_OF.items():
            if kind in booked:
                return CallbackEvent(
                    event_id=_event_id(payment, status),
                    provider_txn_id=payment.provider_txn_id,
                    order_id=payment.order_id,
                    status=status,
                    amount=payment.amount,
                    currency=payment.currency,
                )
        return None

    def parse_callback(self, body: bytes) -> CallbackEvent:
        try:
            data = json.loads(body, object_pairs_hook=_members_named_once)
        except _RepeatedMember as exc:
            raise CallbackPayloadInvalid(f"body names the member {exc.name!r} twice") from None
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise CallbackPayloadInvalid("body is not JSON") from None
        if not isinstance(data, dict):
            raise CallbackPayloadInvalid("body must be a JSON object")
        event_id = _text(data, "event_id", _ID_RE)
        txn_id = _text(data, "provider_txn_id", _ID_RE)
        order_ref = str(data.get("order_id", ""))
        if not _ORDER_ID_RE.fullmatch(order_ref) or not 0 < int(order_ref) < 2**63:
            raise CallbackPayloadInvalid("order_id must be the order's id (digits)")
        status = data.get("status")
        if status not in ("succeeded", "failed"):
            raise CallbackPayloadInvalid("status must be 'succeeded' or 'failed'")
        amount = _amount(data.get("amount"))
        # Checked before quantize(), which raises for large exponents (1e9999).
        if amount.adjusted() > 12:
            raise CallbackPayloadInvalid("amount out of range")
        if amount < 0 or amount != amount.quantize(Decimal("0.01")):
            raise CallbackPayloadInvalid("amount must be a non-negative amount with 2 decimals")
        currency = _text(data, "currency", _CURRENCY_RE)
        return CallbackEvent(
            event_id=event_id,
            provider_txn_id=txn_id,
            order_id=int(order_ref),
            status=status,
            amount=amount,
            currency=currency,
        )


class _RepeatedMember(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _members_named_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each object of a callback's body, refused when it names a member twice: such a body
    says two things at once (``"status": "failed", "status": "succeeded"``), and ``json``
    would keep the last without a word, where the provider's own reader may have meant the
    first. The API's bodies are held to the same rule (``config/parsers.py``)."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedMember(next(name for name, _ in pairs if name in seen or seen.add(name)))
    return members


def _amount(value: Any) -> Decimal:
    """The callback's amount: a decimal string, or a JSON number (read by its text; ``true``
    and ``null`` are the text "True" and "None", no amount)."""
    text = str(value)
    if not _AMOUNT_RE.fullmatch(text):
        raise CallbackPayloadInvalid("amount must be a decimal string")
    return Decimal(text)


def _text(data: dict[str, Any], field: str, pattern: re.Pattern[str]) -> str:
    value = data.get(field)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise CallbackPayloadInvalid(f"{field} is missing or malformed")
    return value


def book(*, payment: Payment, status: str) -> None:
    """The provider's books record that ``payment`` was taken (``succeeded``) or declined."""
    record_operation(
        tenant_id=payment.tenant_id,
        idempotency_key=f"{status}:{payment.provider_txn_id}",
        kind=_BOOKED[status],
        reference=payment.provider_txn_id,
        amount=payment.amount,
    )


def _event_id(payment: Payment, status: str) -> str:
    """One provider event per payment and outcome, however often it is told."""
    return f"evt_{payment.provider_txn_id}_{status}"


def signed_callback(
    *,
    payment: Payment,
    status: str = "succeeded",
    amount: Decimal | None = None,
    currency: str | None = None,
    event_id: str | None = None,
    timestamp: int | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers the provider sends to report ``status`` for ``payment``."""
    body = json.dumps(
        {
            "event_id": event_id or f"evt_{uuid4().hex}",
            "provider_txn_id": payment.provider_txn_id,
            "order_id": str(payment.order_id),
            "status": status,
            "amount": str(payment.amount if amount is None else amount),
            "currency": currency or payment.currency,
        },
        separators=(",", ":"),
    ).encode()
    sent_at = int(time.time()) if timestamp is None else timestamp
    secret = webhook_secrets(payment.provider)[0]
    return body, {
        PROVIDER_HEADER: payment.provider,
        TIMESTAMP_HEADER: str(sent_at),
        SIGNATURE_HEADER: sign(secret=secret, timestamp=sent_at, body=body),
    }


def complete_payment(
    *, provider_name: str, provider_txn_id: str, status: str = "succeeded", deliver: bool = True
):
    """The diner pays (or the payment is declined) at the provider: the provider's books record
    it, then its signed callback is delivered through our webhook service (its result
    returned). ``deliver=False`` is a callback that never arrives: only reconciliation, which
    asks the provider (:meth:`SimulatedProvider.settled_event`), learns of it; returns None.

    The event id is derived from the transaction and status, so running this twice (a retried
    task, a second click) is a duplicate delivery of one provider event.
    """
    from ordering.payments.callbacks import handle_payment_callback

    payment = Payment.all_tenants.get(provider=provider_name, provider_txn_id=provider_txn_id)
    book(payment=payment, status=status)
    if not deliver:
        return None
    body, headers = signed_callback(
        payment=payment, status=status, event_id=_event_id(payment, status)
    )
    return handle_payment_callback(
        provider_name=provider_name,
        raw_body=body,
        timestamp=headers[TIMESTAMP_HEADER],
        signature=headers[SIGNATURE_HEADER],
    )
