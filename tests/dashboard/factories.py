"""Builders shared by the dashboard and browser tests: merchants, and orders in any status."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.db import transaction

from ordering.models import Dish, Order, OrderStatus
from ordering.services.lifecycle import apply_transition, cancel_order, transition_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import Membership, Tenant

S = OrderStatus
PASSWORD = "pw-dashboard-123"
TOKEN_RE = re.compile(r'name="idempotency_key" value="([^"]+)"')
# Forward path of the lifecycle; an order in status X went through every step before it.
FORWARD = [S.ACCEPTED, S.PREPARING, S.READY, S.DELIVERING, S.COMPLETED]


def make_merchant(tenant: Tenant, username: str, role: str = "owner") -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def make_order(tenant: Tenant, dish: Dish, status: str = S.PAID, quantity: int = 1) -> Order:
    """An order brought to ``status`` the way production does (services), the provider's
    "paid" callback standing in as one direct FSM move."""
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=quantity)],
        payment_method="card",
        diner_id="diner-1",
        actor="test",
    )
    if status == S.CREATED:
        return order
    if status == S.CANCELLED:
        return cancel_order(tenant=tenant, order_id=order.pk, actor="test")
    pay_order(tenant=tenant, order_id=order.pk, actor="test")
    if status == S.PAYING:
        return Order.all_tenants.get(pk=order.pk)
    with transaction.atomic():
        order = Order.all_tenants.get(pk=order.pk)
        apply_transition(order, order.mark_paid, actor="provider:test")
    if status == S.CANCELLING:
        return cancel_order(tenant=tenant, order_id=order.pk, actor="test")
    for target in FORWARD[: FORWARD.index(status) + 1] if status in FORWARD else []:
        transition_order(tenant=tenant, order_id=order.pk, target=target, actor="test")
    return Order.all_tenants.get(pk=order.pk)


def form_token(html: str) -> str:
    """The one-time token of the first form on the page."""
    match = TOKEN_RE.search(html)
    assert match, "the page has no form with an idempotency token"
    return match.group(1)
