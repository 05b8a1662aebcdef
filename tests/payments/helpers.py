"""Builders for orders at each payment stage, the way production gets them there (services and
the simulated provider's signed callback), shared by the payment, saga and worker tests."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from ordering.models import Dish, Order, Payment
from ordering.payments.simulated import complete_payment, signed_callback
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import Tenant

CALLBACK_URL = "/api/v1/payments/callback/"


def paying_order(
    tenant: Tenant, dish: Dish, *, quantity: int = 1, coupon_code: str | None = None
) -> tuple[Order, Payment]:
    """An order in PAYING with its pending payment at the simulated provider."""
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=quantity)],
        payment_method="card",
        coupon_code=coupon_code,
        diner_id="diner-1",
        actor="test",
    )
    order, payment = pay_order(tenant=tenant, order_id=order.pk, actor="test")
    return order, payment


def paid_order(
    tenant: Tenant, dish: Dish, *, quantity: int = 1, coupon_code: str | None = None
) -> tuple[Order, Payment]:
    """An order made PAID by the provider's signed "succeeded" callback."""
    order, payment = paying_order(tenant, dish, quantity=quantity, coupon_code=coupon_code)
    result = complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id
    )
    assert result.outcome == "applied", result
    order.refresh_from_db()
    payment.refresh_from_db()
    return order, payment


def post_callback(client: APIClient, body: bytes, headers: dict[str, str]) -> Any:
    """POST a callback the way the provider does: raw bytes, its headers, no API key."""
    return client.post(
        CALLBACK_URL,
        data=body,
        content_type="application/json",
        headers=headers,
    )


def signed(payment: Payment, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
    return signed_callback(payment=payment, **kwargs)
