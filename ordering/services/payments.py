"""Starting a payment: CREATED -> PAYING (or paying again after a declined card) and the
Payment row, in one transaction; or, for an order that costs nothing, CREATED -> PAID at once.

The provider is reached only through its adapter (``ordering.payments``); its answer (the
provider's transaction id) is what the signed callback later names.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from ordering.background.outbox import emit_event
from ordering.models import EventType, Order, OrderStatus, Payment
from ordering.models.orders import MAX_PAYMENT_ATTEMPTS, costs_nothing
from ordering.one_statement import insert_together
from ordering.payments.registry import default_provider
from ordering.prefetch import with_related
from ordering.services.lifecycle import (
    access_paying_order,
    apply_transition,
    described_conflicts,
    rerun_lost_races,
)
from tenants.models import Tenant

# why an order was paid without a payment, in its ``order.paid`` event
NOTHING_TO_PAY = "nothing_to_pay"


@rerun_lost_races
def pay_order(
    *, tenant: Tenant, order_id: int, actor: str, diner_id: str | None = None
) -> tuple[Order, Payment | None]:
    """Attach a payment and move the order to PAYING: its first one (CREATED -> PAYING), or
    another once every payment so far was declined (PAYING -> PAYING, ``pay_again``).

    An order whose total is 0.00 (a coupon covering it, free dishes) is settled instead:
    CREATED -> PAID with its ``order.paid`` event (``settled: nothing_to_pay``) in one
    transaction, no provider asked and no Payment made (None is returned for it). Providers
    refuse a payment of nothing, and one made would have a cancel "refund" 0.00.

    The first: the FSM condition (no payment attached yet) plus the conditional status update
    make a second concurrent pay of the same order a 409, never a second Payment. The condition
    reads the payments read with the order, in its round trip: the first payment is only ever
    attached by this move, out of CREATED, which the conditional update checks again as it
    writes.

    Paying again leaves the status as it is, so the conditional update cannot tell two of them
    apart: the order's row is locked first, as a callback locks it (``ordering.payments.
    callbacks``), and the order and its payments are read again under the lock. Of two
    concurrent attempts the second then sees the first's pending payment and is refused (409);
    a success arriving meanwhile for a declined payment either committed first (the order is
    PAID: 409) or finds the new payment pending and voids it as it marks the order paid."""
    provider = default_provider()
    with described_conflicts(), transaction.atomic():
        order = access_paying_order(
            tenant=tenant, order_id=order_id, diner_id=diner_id, related=("payments",)
        )
        if costs_nothing(order):
            return _settle_without_payment(order, actor=actor), None
        again = order.status == OrderStatus.PAYING
        earlier = list(order.payments.all())
        apply_transition(
            order,
            order.pay_again if again else order.start_payment,
            actor=actor,
            refusal=pay_again_refusal(earlier) if again else None,
        )
        intent = provider.start_payment(order=order, amount=order.total, currency=order.currency)
        payment = Payment(
            tenant=tenant,
            order=order,
            provider=provider.name,
            provider_txn_id=intent.provider_txn_id,
            method=order.payment_method,
            amount=order.total,
            currency=order.currency,
        )
        insert_together([payment])  # its INSERT compiled once per process (one_statement.py)
    # the newest first, as Payment.Meta.ordering reads them
    with_related(order, payments=[payment, *earlier])
    return order, payment


def _settle_without_payment(order: Order, *, actor: str) -> Order:
    """CREATED -> PAID for an order that costs nothing, and its ``order.paid`` event (the day's
    sales count it, for 0.00); the caller holds the transaction. From any other status the
    move is refused (409) like any pay of an order not awaiting one."""
    apply_transition(order, order.settle_without_payment, actor=actor)
    emit_event(
        order=order,
        event_type=EventType.ORDER_PAID,
        payload={
            "settled": NOTHING_TO_PAY,
            "amount": str(order.total),
            "currency": order.currency,
        },
    )
    return order


def pay_again_refusal(payments: Sequence[Payment]) -> str | None:
    """Why an order in PAYING cannot be paid again, in the diner's terms (None: it can, as far
    as its ``payments`` go). The move's own condition (``every_payment_declined``) decides;
    this only words its refusal: "not allowed from PAYING" told a diner neither to wait for
    the pending payment nor that the order had taken all the payments it may."""
    if any(payment.status == Payment.Status.PENDING for payment in payments):
        return (
            "A payment of this order is still pending: the payment provider decides it; "
            "pay again only once it is declined."
        )
    if len(payments) >= MAX_PAYMENT_ATTEMPTS:
        return (
            f"This order's {MAX_PAYMENT_ATTEMPTS} payments were all declined, the most one "
            "order may start: cancel it and order again."
        )
    return None
