"""Ordering data: the menu, coupons, orders with their lifecycle, payments, and layer 4 (the
outbox, the saga's compensations and dead letters, provider callbacks)."""

from ordering.models.callbacks import PaymentCallback, ProviderConflict
from ordering.models.compensation import Compensation, DeadLetter
from ordering.models.departed import DepartedPayment
from ordering.models.menu import Coupon, Dish
from ordering.models.order_numbers import OrderNumberCounter
from ordering.models.orders import Order, OrderLine, OrderStatus, OrderTransition
from ordering.models.outbox import EventType, OutboxEvent, ProcessedEvent
from ordering.models.payments import Payment
from ordering.models.privacy import DinerDataExport, DinerErasure, TenantOffboarding
from ordering.models.sales import SalesDay
from ordering.models.simulated import FaultPlan, SimulatedOperation
from ordering.models.worker_lease import WorkerLease

__all__ = [
    "Compensation",
    "Coupon",
    "DeadLetter",
    "DepartedPayment",
    "DinerDataExport",
    "DinerErasure",
    "Dish",
    "EventType",
    "FaultPlan",
    "Order",
    "OrderLine",
    "OrderNumberCounter",
    "OrderStatus",
    "OrderTransition",
    "OutboxEvent",
    "Payment",
    "PaymentCallback",
    "ProcessedEvent",
    "ProviderConflict",
    "SalesDay",
    "SimulatedOperation",
    "TenantOffboarding",
    "WorkerLease",
]
