"""Reads of orders and the menu, always within one tenant (and one diner when given)."""

from __future__ import annotations

from django.db.models import QuerySet

from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Dish, Order
from tenants.models import Tenant


def menu_of(*, tenant: Tenant) -> QuerySet[Dish]:
    return Dish.objects.for_tenant(tenant).filter(active=True).order_by("name")


def orders_of(*, tenant: Tenant, diner_id: str | None = None) -> QuerySet[Order]:
    """A tenant's orders; a diner app acting for one diner sees only that diner's orders."""
    orders = Order.objects.for_tenant(tenant)
    if diner_id is not None:
        orders = orders.filter(diner_id=diner_id)
    return orders


def access_order(
    *, tenant: Tenant, order_id: int, diner_id: str | None = None, for_update: bool = False
) -> Order:
    """The order if this caller may see it; 404 ``ORDER_NOT_FOUND`` otherwise.

    Another tenant's (or diner's) order is indistinguishable from one that does not exist.
    """
    orders = orders_of(tenant=tenant, diner_id=diner_id)
    if for_update:
        orders = orders.select_for_update()
    try:
        return orders.get(pk=order_id)
    except (Order.DoesNotExist, ValueError, OverflowError):
        raise OrderingError(OrderingErrorCode.ORDER_NOT_FOUND, "Order not found") from None
