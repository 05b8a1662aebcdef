"""Orders as the API answers them, written without building DRF serializers per order.

The serializers in :mod:`ordering.api.serializers` define the shapes and the OpenAPI schema.
Instantiating one (``DinerOrderDetailSerializer(order).data``) introspects the models afresh for
every order: the nested line, payment and transition serializers and ~25 fields, about 1 ms of
CPU per order, a tenth of a whole order create. These functions write the same dicts with the
same DRF field classes' ``to_representation`` (one instance each, made once), so numbers, dates
and times come out exactly as the serializers write them; ``tests/ordering/test_rendering.py``
pins every shape (diner and merchant, detail and list) to the serializers' output.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ordering.actors import without_staff_names
from ordering.models import Dish, Order, OrderLine, OrderTransition, Payment
from ordering.models.payments import payment_of_record
from tenants.permissions import Capability, may
from tenants.principals import ApiPrincipal

_MONEY = serializers.DecimalField(max_digits=12, decimal_places=2)
_DAY = serializers.DateField()
_WHEN = serializers.DateTimeField()
_PRICE = serializers.DecimalField(  # as DRF maps the model's field
    max_digits=Dish._meta.get_field("price").max_digits,
    decimal_places=Dish._meta.get_field("price").decimal_places,
)


def _money(value: Any) -> Any:
    return _MONEY.to_representation(value)


def _when(value: Any) -> Any:
    return _WHEN.to_representation(value)


def menu_entry(row: tuple[Any, ...]) -> dict[str, Any]:
    """A dish of the menu as ``DishSerializer`` writes it, from its ``MENU_COLUMNS`` (the
    menu holds active dishes only, so a dish is available while it has stock)."""
    pk, name, description, price, stock = row
    return {
        "id": pk,
        "name": name,
        "description": description,
        "price": _PRICE.to_representation(price),
        "stock": stock,
        "available": stock > 0,
    }


def _line(line: OrderLine) -> dict[str, Any]:
    return {
        "dish_id": line.dish_id,
        "dish_name": line.dish_name,
        "unit_price": _money(line.unit_price),
        "quantity": line.quantity,
        "line_total": _money(line.line_total),
    }


def _payment(payment: Payment, *, internal: bool) -> dict[str, Any]:
    shown = {"provider": payment.provider}
    if internal:
        shown["provider_txn_id"] = payment.provider_txn_id
    shown.update(
        method=payment.method,
        amount=_money(payment.amount),
        currency=payment.currency,
        status=payment.status,
    )
    return shown


def _transition(step: OrderTransition, *, internal: bool) -> dict[str, Any]:
    shown = {"from_status": step.from_status, "to_status": step.to_status}
    if internal:
        shown["actor"] = without_staff_names(step.actor)
    shown["at"] = _when(step.at)
    return shown


def shown_order(principal: ApiPrincipal, order: Order, *, detail: bool = True) -> dict[str, Any]:
    """The one place where the caller's role picks what an order shows: every field for a
    merchant key, no back-office field (provider transaction id, transition actors) for a
    diner."""
    internal = may(principal, Capability.SEE_INTERNAL_FIELDS)
    return render_order(order, internal=internal, detail=detail)


def shown_payment(order: Order) -> Payment | None:
    """The payment an order's answer shows (:func:`payment_of_record`), from the rows a
    service or a ``prefetch_related`` already holds when it holds them."""
    return payment_of_record(list(order.payments.all()))


def render_order(order: Order, *, internal: bool, detail: bool) -> dict[str, Any]:
    """What the serializer of that shape gives (``OrderDetailSerializer`` for internal
    detail, ``DinerOrderSerializer`` for a diner's list...); ``internal``: the caller may see
    the restaurant's back-office fields."""
    payment = shown_payment(order)
    shown: dict[str, Any] = {
        "id": str(order.id),
        "number": order.number,
        "number_label": order.number_label,
        "business_day": _DAY.to_representation(order.business_day),
        "status": order.status,
        "diner_id": order.diner_id,
        "payment_method": order.payment_method,
        "coupon_code": order.coupon.code if order.coupon_id is not None else None,
        "subtotal": _money(order.subtotal),
        "discount": _money(order.discount),
        "total": _money(order.total),
        "currency": order.currency,
        "note": order.note,
        "contact": {"phone": order.contact_phone, "address": order.delivery_address},
        "lines": [_line(line) for line in order.lines.all()],
        "payment": None if payment is None else _payment(payment, internal=internal),
        "created_at": _when(order.created_at),
        "updated_at": _when(order.updated_at),
    }
    if detail:
        shown["transitions"] = [
            _transition(step, internal=internal) for step in order.transitions.all()
        ]
    return shown
