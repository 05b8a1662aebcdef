"""Ordering data: the menu, coupons, orders with their lifecycle, payments."""

from ordering.models.menu import Coupon, Dish
from ordering.models.orders import Order, OrderLine, OrderStatus, OrderTransition
from ordering.models.payments import Payment
from ordering.models.worker_lease import WorkerLease

__all__ = [
    "Coupon",
    "Dish",
    "Order",
    "OrderLine",
    "OrderStatus",
    "OrderTransition",
    "Payment",
    "WorkerLease",
]
