"""The refunds of a diner's order, as the diner's copy of their data lists them.

A refund is money given back to the diner. The platform keeps the refunds it makes as the
step that made them (:class:`~ordering.models.Compensation`): a cancel's ``refund_payment``
and the ``refund_capture`` of money the provider took that the order did not want; and the
refunds its staff make by hand at the provider as the provider conflict they resolve with the
outcome "refunded" (its amount the one the provider reported). A payment's status ``refunded``
says that one happened, not how much or when; a person asking for their data is owed the
refund itself. A cancel's refund that failed for good and that staff settled outside the
platform (its dead letter discarded with a note) is ``settled_by_staff``. What the copy leaves
out is the provider's refund reference, as it leaves out the payment's, and staff's names and
notes.

Not a refund: a cancel that found no money taken (a payment voided before capture, an order
that cost nothing), and a conflict staff resolved otherwise (accepted as paid, ignored); the
step of a capture's refund that staff's resolution closed (``settled_by``) is the conflict's
to tell, so it is not listed twice.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from ordering.models import Compensation, DeadLetter, Order, Payment, ProviderConflict
from ordering.models.payments import payment_of_record
from ordering.payments.capture_refunds import ACTOR as PLATFORM_REFUNDS

Step = Compensation.Step
# what each refund gave back, as the copy names it
REFUND_KINDS = {Step.REFUND_PAYMENT: "cancel", Step.REFUND_CAPTURE: "unwanted_capture"}
# a step's status as the copy names it: a failed one waits for the platform's staff
REFUND_STATUSES = {
    Compensation.Status.PENDING: "pending",
    Compensation.Status.DONE: "refunded",
    Compensation.Status.FAILED: "waiting_for_staff",
}
When = Callable[[datetime | None], str | None]


def refunds_of(order: Order, *, when: When) -> list[dict[str, Any]]:
    """The order's refunds, the platform's (by step) then staff's (by conflict), each oldest
    first, from its prefetched ``compensations``, ``payments``, ``provider_conflicts`` and
    ``dead_letters`` (read with the batch of orders, as its lines are):
    what each gave back (``of``), the amount and currency, its status, when it was asked for
    and when it was made (``null`` until then), times written by ``when`` (the copy's own
    form)."""
    payments = sorted(order.payments.all(), key=lambda payment: payment.created_at, reverse=True)
    steps = sorted(order.compensations.all(), key=lambda step: step.pk)
    conflicts = sorted(order.provider_conflicts.all(), key=lambda conflict: conflict.pk)
    by_platform = [
        refund for step in steps if (refund := _step_refund(order, step, payments, when))
    ]
    by_staff = [
        _staff_refund(conflict, when) for conflict in conflicts if _staff_refunded(conflict)
    ]
    return by_platform + by_staff


def _step_refund(
    order: Order, step: Compensation, payments: list[Payment], when: When
) -> dict[str, Any] | None:
    if step.step not in REFUND_KINDS:
        return None
    result = step.result if isinstance(step.result, dict) else {}
    if step.status == Compensation.Status.DONE and "amount" not in result:
        return None  # no money to give back, or staff settled it (their conflict tells)
    payment = _refunded_payment(step, payments)
    amount = result.get("amount", str(payment.amount) if payment is not None else None)
    if amount is None:
        return None  # a cancel not run yet of an order no payment took money for
    return {
        "of": REFUND_KINDS[step.step],
        "amount": str(Decimal(amount)),
        "currency": payment.currency if payment is not None else order.currency,
        "status": _status(order, step),
        "asked_at": when(step.created_at),
        "refunded_at": when(step.done_at),
    }


def _status(order: Order, step: Compensation) -> str:
    """The step's status as the copy names it; a failed one whose dead letters staff all
    closed without running it again was settled by them some other way (their note, which
    the copy leaves out, says how), and waits for no one."""
    if step.status == Compensation.Status.FAILED:
        letters = [
            letter for letter in order.dead_letters.all() if letter.key == step.compensation_id
        ]
        if letters and all(letter.state == DeadLetter.State.DISCARDED for letter in letters):
            return "settled_by_staff"
    return REFUND_STATUSES[step.status]


def _refunded_payment(step: Compensation, payments: list[Payment]) -> Payment | None:
    """The payment a refund step gives back: the capture named by its id, or the one that
    paid the order (as the cancel saga picks it), if it took money."""
    if step.step == Step.REFUND_CAPTURE:
        payment_id = step.compensation_id.rsplit(":", 1)[-1]
        return next((p for p in payments if str(p.pk) == payment_id), None)
    paying = payment_of_record([p for p in payments if not p.unwanted_capture])
    taken = (Payment.Status.SUCCEEDED, Payment.Status.REFUNDED)
    return paying if paying is not None and paying.status in taken else None


def _staff_refunded(conflict: ProviderConflict) -> bool:
    """Staff resolved it as refunded at the provider (the platform's own refunds resolve
    their conflict so too, and are listed by their step)."""
    return (
        conflict.resolved
        and conflict.outcome == ProviderConflict.Outcome.REFUNDED
        and conflict.resolved_by != PLATFORM_REFUNDS
    )


def _staff_refund(conflict: ProviderConflict, when: When) -> dict[str, Any]:
    kind = (
        "unwanted_capture"
        if conflict.kind in ProviderConflict.REFUNDED_BY_PLATFORM
        else "provider_report"
    )
    return {
        "of": kind,
        "amount": str(conflict.reported_amount),
        "currency": conflict.reported_currency,
        "status": "refunded_by_staff",
        "asked_at": when(conflict.created_at),
        "refunded_at": when(conflict.resolved_at),
    }
