"""Starting a payment: CREATED -> PAYING and the Payment row, in one transaction.

The provider is reached only through its adapter (``ordering.payments``); its answer (the
provider's transaction id) is what the signed callback later names.
"""

from __future__ import annotations

from django.db import transaction

from ordering.models import Order, Payment
from ordering.one_statement import insert_together
from ordering.payments.registry import default_provider
from ordering.prefetch import with_related
from ordering.selectors import access_order
from ordering.services.lifecycle import apply_transition, described_conflicts
from tenants.models import Tenant


def pay_order(
    *, tenant: Tenant, order_id: int, actor: str, diner_id: str | None = None
) -> tuple[Order, Payment]:
    """Attach the order's one payment and move it to PAYING.

    The FSM condition (no payment attached yet) plus the conditional status update make a
    second concurrent pay of the same order a 409, never a second Payment. The condition reads
    the payments read with the order, in its round trip: a payment is only ever attached by
    this move, out of CREATED, which the conditional update checks again as it writes.
    """
    provider = default_provider()
    with described_conflicts(), transaction.atomic():
        order = access_order(
            tenant=tenant, order_id=order_id, diner_id=diner_id, related=("payments",)
        )
        apply_transition(order, order.start_payment, actor=actor)
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
    with_related(order, payments=[payment])  # none were read with the order (the condition)
    return order, payment
