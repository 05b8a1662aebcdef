"""Reads of orders and the menu, always within one tenant (and one diner when given)."""

from __future__ import annotations

from django.db.models import QuerySet

from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Coupon, Dish, Order
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


# --- dashboard reads (merchant pages); another tenant's id is "not found", never "forbidden" --


def board_orders(*, tenant: Tenant, limit: int = 200) -> QuerySet[Order]:
    """The newest ``limit`` orders for the board, with what the cards show preloaded."""
    return orders_of(tenant=tenant).order_by("-created_at", "-id").prefetch_related("lines")[:limit]


def order_for_dashboard(*, tenant: Tenant, order_id: int) -> Order | None:
    """One order with its lines, payments and transition log, or None if not this tenant's."""
    return (
        orders_of(tenant=tenant)
        .select_related("coupon")
        .prefetch_related("lines", "payments", "transitions")
        .filter(pk=order_id)
        .first()
    )


def dishes_of(*, tenant: Tenant) -> QuerySet[Dish]:
    """Every dish of the tenant, active or not (the menu page manages both)."""
    return Dish.objects.for_tenant(tenant).order_by("name")


def dish_of(*, tenant: Tenant, dish_id: int) -> Dish | None:
    return Dish.objects.for_tenant(tenant).filter(pk=dish_id).first()


def coupons_of(*, tenant: Tenant) -> QuerySet[Coupon]:
    return Coupon.objects.for_tenant(tenant).order_by("-active", "code")


def coupon_of(*, tenant: Tenant, coupon_id: int) -> Coupon | None:
    return Coupon.objects.for_tenant(tenant).filter(pk=coupon_id).first()
