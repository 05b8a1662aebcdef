"""The simulated outside world (payment provider, courier service): its books and fault plans.

Used only by the simulated adapters (``ordering.payments.simulated``, ``ordering.delivery``),
never by real ones, so fault injection is explicit data in the database — a :class:`FaultPlan`
row for one order and step — rather than a monkeypatch, and it reaches worker processes too.
"""

from __future__ import annotations

import logging
import time
from decimal import Decimal

from django.db import transaction
from django.db.models import F

from ordering.models import FaultPlan, Order, SimulatedOperation
from ordering.payments.base import ProviderError

logger = logging.getLogger(__name__)


def record_operation(
    *, tenant_id: int | None, idempotency_key: str, kind: str, reference: str, amount: Decimal
) -> tuple[SimulatedOperation, bool]:
    """Do the simulated operation once per key: (the operation, whether it was new).
    ``tenant_id`` None: on the platform's own account (a refund of a departed restaurant's
    payment).

    Committed on its own (the caller is outside any transaction, as with a real provider), so
    the effect exists even if the caller dies before recording it — which is the case the
    callers' idempotency keys are for.

    A key seen before with other terms (another kind, reference or amount) is refused with
    :class:`ProviderError`, as a careful provider refuses it (Stripe: 400
    ``idempotency_error``): the operation asked for was not done, and answering with the
    first one as replayed would have the caller record, say, a refund that never moved money.
    """
    with transaction.atomic():
        operation, created = SimulatedOperation.objects.get_or_create(
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            defaults={"kind": kind, "reference": reference, "amount": amount},
        )
        if not created:
            if (operation.kind, operation.reference, operation.amount) != (
                kind,
                reference,
                amount,
            ):
                raise ProviderError(
                    f"idempotency key {idempotency_key!r} was used for another operation "
                    f"({operation.kind} of {operation.amount} for {operation.reference})"
                )
            SimulatedOperation.objects.filter(pk=operation.pk).update(calls=F("calls") + 1)
    return operation, created


def fail_if_planned(*, order_id: int, step: str) -> None:
    """Raise :class:`ProviderError` if the order's plan has failures left for ``step``."""
    if FaultPlan.objects.filter(order_id=order_id, step=step, fail_times__gt=0).update(
        fail_times=F("fail_times") - 1
    ):
        raise ProviderError(f"simulated failure of {step} for order {order_id}")


def hang_if_planned(*, order_id: int, step: str) -> None:
    """Sleep if the order's plan has delays left for ``step`` (a slow provider answer)."""
    for plan_id, seconds in FaultPlan.objects.filter(
        order_id=order_id, step=step, delay_times__gt=0
    ).values_list("pk", "delay_seconds"):
        if FaultPlan.objects.filter(pk=plan_id, delay_times__gt=0).update(
            delay_times=F("delay_times") - 1
        ):
            logger.info("simulated %s for order %s hangs %.1f s", step, order_id, seconds)
            time.sleep(seconds)


def plan_fault(
    *,
    order: Order,
    step: str,
    fail_times: int = 0,
    delay_times: int = 0,
    delay_seconds: float = 0,
) -> FaultPlan:
    """Make the simulated adapters fail or hang ``step`` of ``order`` (tests and demos)."""
    plan, _ = FaultPlan.objects.update_or_create(
        tenant_id=order.tenant_id,
        order=order,
        step=step,
        defaults={
            "fail_times": fail_times,
            "delay_times": delay_times,
            "delay_seconds": delay_seconds,
        },
    )
    return plan
