"""The courier service the cancel saga tells to stand down (``settings.DELIVERY_ADAPTER``).

Same contract as payment adapters (``ordering.payments.base``): ``cancel_delivery`` is idempotent
on its key, and a failure that may pass raises ``ProviderError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from ordering.models import Compensation, Order, SimulatedOperation
from ordering.simulation import fail_if_planned, hang_if_planned, record_operation


@dataclass(frozen=True)
class DeliveryCancellation:
    reference: str
    replayed: bool


class DeliveryAdapter(Protocol):
    def cancel_delivery(self, *, order: Order, idempotency_key: str) -> DeliveryCancellation:
        """Cancel any courier booked for ``order``, at most once per ``idempotency_key``."""
        ...


class NoDeliveryPartner:
    """No courier service is integrated: there is never a booking to cancel."""

    def cancel_delivery(self, *, order: Order, idempotency_key: str) -> DeliveryCancellation:
        return DeliveryCancellation(reference="", replayed=False)


class SimulatedDelivery:
    """A courier service that records cancellations once per key and obeys fault plans."""

    def cancel_delivery(self, *, order: Order, idempotency_key: str) -> DeliveryCancellation:
        step = Compensation.Step.CANCEL_DELIVERY
        fail_if_planned(order_id=order.pk, step=step)
        operation, created = record_operation(
            tenant_id=order.tenant_id,
            idempotency_key=idempotency_key,
            kind=SimulatedOperation.Kind.DELIVERY_CANCEL,
            reference=str(order.pk),
            amount=Decimal("0.00"),
        )
        hang_if_planned(order_id=order.pk, step=step)
        return DeliveryCancellation(reference=f"sim_dc_{operation.pk}", replayed=not created)


def delivery_adapter() -> DeliveryAdapter:
    return import_string(settings.DELIVERY_ADAPTER)()
