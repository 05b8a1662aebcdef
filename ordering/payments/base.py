"""The provider adapter interface: what the ordering services need from a payment provider.

An adapter hides one provider's API. Services never talk to a provider any other way, so adding a
provider is adding an adapter and a ``settings.PAYMENT_PROVIDERS`` entry.

Contract every adapter keeps, because the saga and the webhook rely on it:

- ``refund`` is idempotent on ``idempotency_key``: a second call with the same key (after a
  crash, a redelivery, a retry) returns the first refund and moves no money;
- failures that may pass (timeouts, 5xx, rate limits) raise :class:`ProviderError`, which the
  saga retries with backoff; anything else is a bug and ends in a dead letter the same way;
- ``parse_callback`` only parses: the signature was checked before, and what to do with the
  event is decided by :mod:`ordering.payments.callbacks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from ordering.models import Order, Payment

CallbackStatus = Literal["succeeded", "failed"]


class ProviderError(Exception):
    """The provider refused or could not be reached; trying again later may succeed."""


class CallbackPayloadInvalid(ValueError):
    """The (authentic) callback body is not what the provider's schema says."""


@dataclass(frozen=True)
class PaymentIntent:
    """A payment started at the provider; its id comes back in every callback about it."""

    provider_txn_id: str


@dataclass(frozen=True)
class RefundResult:
    refund_id: str
    amount: Decimal
    replayed: bool  # True: the provider had seen this idempotency key and moved no money now


@dataclass(frozen=True)
class CallbackEvent:
    """One provider notification, in the provider-neutral shape the webhook service applies."""

    event_id: str  # the provider's id of this notification (redeliveries repeat it)
    provider_txn_id: str
    order_id: int  # the reference we gave the provider when starting the payment
    status: CallbackStatus
    amount: Decimal
    currency: str


class PaymentProvider(Protocol):
    name: str

    def start_payment(self, *, order: Order, amount: Decimal, currency: str) -> PaymentIntent:
        """Open a payment for ``order`` at the provider (called inside the pay transaction)."""
        ...

    def refund(self, *, payment: Payment, amount: Decimal, idempotency_key: str) -> RefundResult:
        """Give ``amount`` of ``payment`` back, at most once per ``idempotency_key``."""
        ...

    def parse_callback(self, body: bytes) -> CallbackEvent:
        """The event in a verified callback body; :class:`CallbackPayloadInvalid` if malformed."""
        ...

    def settled_event(self, *, payment: Payment) -> CallbackEvent | None:
        """What the provider's books say of ``payment``: the event its callback carries (same
        event id) once the diner paid or the payment failed, or None while it is open.
        :class:`ProviderError` when the provider cannot be asked. Reconciliation calls it for
        payments whose callback has not come."""
        ...
