"""The webhook's inbox: each provider event id received once, and what its first delivery said.

``PaymentCallback`` is unique on ``(tenant, provider, event_id)``: of several deliveries of one
event id the database lets one insert, and only that one is carried out. An event id found in
the inbox is a duplicate only when the delivery says what the one received said (the payment,
its transaction, the status, amount and currency): a provider's bug, or its test mode mixed
with its live one, can send an id it used before with another event, and answered as a
duplicate, that event's capture was lost without a trace (:func:`same_as_received`).
"""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from ordering.models import Order, Payment, PaymentCallback
from ordering.payments.base import CallbackEvent

# the inbox's unique key: one row per provider event (uniq_payment_callback_event)
_EVENT_KEY = ("tenant", "provider", "event_id")


def record_in_inbox(
    *, order: Order, payment: Payment, event: CallbackEvent, provider: str, outcome: str
) -> bool:
    """Whether this provider event id is new: its inbox row was inserted, with ``outcome``.

    One ``INSERT ... ON CONFLICT (tenant, provider, event id) DO NOTHING RETURNING id``: a
    duplicate inserts nothing and returns nothing, with no error. (Catching the unique index's
    error instead needs a savepoint around the insert, so that the transaction stays usable:
    two more round trips for every callback.) A concurrent delivery of the same event id waits
    on the index until the first one's transaction ends, then inserts nothing if it committed.
    The values are converted by each field, as a save would."""
    values = {
        "tenant": order.tenant_id,
        "provider": provider,
        "event_id": event.event_id,
        "provider_txn_id": event.provider_txn_id,
        "order": order.pk,
        "payment": payment.pk,
        "status": event.status,
        "amount": event.amount,
        "currency": event.currency,
        "outcome": outcome,
        "received_at": timezone.now(),
    }
    fields = [PaymentCallback._meta.get_field(name) for name in values]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    unique = ", ".join(quote(PaymentCallback._meta.get_field(name).column) for name in _EVENT_KEY)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(PaymentCallback._meta.db_table)} ({columns}) "
            f"VALUES ({', '.join(['%s'] * len(fields))}) "
            f"ON CONFLICT ({unique}) DO NOTHING RETURNING {quote(PaymentCallback._meta.pk.column)}",
            [
                field.get_db_prep_save(value, connection=connection)
                for field, value in zip(fields, values.values(), strict=True)
            ],
        )
        return cursor.fetchone() is not None


def same_as_received(
    *, order: Order, payment: Payment, event: CallbackEvent, provider: str
) -> bool:
    """Whether the inbox's row of ``event``'s id (:func:`record_in_inbox` found one) says what
    ``event`` says of ``payment``: then it is a redelivery of that event.

    Read after the insert that found the row, in its own statement: at READ COMMITTED it sees
    the row committed by a delivery the insert waited on, which the insert's own snapshot
    predates. A row of an old release without its payment is compared by its order."""
    received = PaymentCallback.all_tenants.values(
        "order_id", "payment_id", "provider_txn_id", "status", "amount", "currency"
    ).get(tenant_id=order.tenant_id, provider=provider, event_id=event.event_id)
    return received["payment_id"] in (None, payment.pk) and (
        received["order_id"],
        received["provider_txn_id"],
        received["status"],
        received["amount"],
        received["currency"],
    ) == (order.pk, event.provider_txn_id, event.status, event.amount, event.currency)
