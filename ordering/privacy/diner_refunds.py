"""The refunds of a diner's order, as the diner's copy of their data lists them.

A refund is money given back to the diner, which the platform keeps as the step that made it
(:class:`~ordering.models.Compensation`): a cancel's ``refund_payment`` and the
``refund_capture`` of money the provider took that the order did not want. A payment's status
``refunded`` says that one happened, not how much or when; a person asking for their data is
owed the refund itself. What the copy leaves out is the provider's refund reference, as it
leaves out the payment's.

A cancel that found no money taken (a payment voided before capture, an order that cost
nothing) moved no money and is no refund: it is not listed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from ordering.models import Compensation, Order, Payment
from ordering.models.payments import payment_of_record

Step = Compensation.Step
# what each refund gave back, as the copy names it
REFUND_KINDS = {Step.REFUND_PAYMENT: "cancel", Step.REFUND_CAPTURE: "taken_after_cancel"}
# a step's status as the copy names it: a failed one waits for the platform's staff
REFUND_STATUSES = {
    Compensation.Status.PENDING: "pending",
    Compensation.Status.DONE: "refunded",
    Compensation.Status.FAILED: "waiting_for_staff",
}


def refunds_of(
    order: Order, *, when: Callable[[datetime | None], str | None]
) -> list[dict[str, Any]]:
    """The order's refunds, oldest first, from its prefetched ``compensations`` and
    ``payments``: what each gave back (``of``), the amount and currency, its status, when it
    was asked for and when it was made (``null`` until then), times written by ``when`` (the
    copy's own form)."""
    payments = sorted(order.payments.all(), key=lambda payment: payment.created_at, reverse=True)
    refunds = []
    for step in sorted(order.compensations.all(), key=lambda step: step.pk):
        if step.step not in REFUND_KINDS or _moved_nothing(step):
            continue
        payment = _refunded_payment(step, payments)
        amount = step.result.get("amount") if isinstance(step.result, dict) else None
        if amount is None and payment is not None:
            amount = str(payment.amount)
        if amount is None:
            continue  # a cancel not run yet of an order no payment took money for
        refunds.append(
            {
                "of": REFUND_KINDS[step.step],
                "amount": str(Decimal(amount)),
                "currency": payment.currency if payment is not None else order.currency,
                "status": REFUND_STATUSES[step.status],
                "asked_at": when(step.created_at),
                "refunded_at": when(step.done_at),
            }
        )
    return refunds


def _moved_nothing(step: Compensation) -> bool:
    """A cancel's refund step done without a provider refund: there was no money to give."""
    result = step.result if isinstance(step.result, dict) else {}
    return (
        step.status == Compensation.Status.DONE
        and "refund_id" in result
        and not (result["refund_id"])
    )


def _refunded_payment(step: Compensation, payments: list[Payment]) -> Payment | None:
    """The payment a refund step gives back: the capture named by its id, or the one that
    paid the order (as the cancel saga picks it), if it took money."""
    if step.step == Step.REFUND_CAPTURE:
        payment_id = step.compensation_id.rsplit(":", 1)[-1]
        return next((p for p in payments if str(p.pk) == payment_id), None)
    paying = payment_of_record([p for p in payments if not p.unwanted_capture])
    taken = (Payment.Status.SUCCEEDED, Payment.Status.REFUNDED)
    return paying if paying is not None and paying.status in taken else None
