"""Placing orders: server-side prices, atomic stock and coupon, nothing written on refusal."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ordering.errors import OrderingError
from ordering.models import Coupon, Dish, Order, OrderLine
from ordering.order_ids import decode_order_id, dish_bucket
from ordering.services.placing import MAX_ORDER_AMOUNT, ItemRequest, place_order
from tenants.routing import tenant_shard
from tests.ordering.test_lifecycle import race


def order_of(tenant, *items, coupon_code=None):
    return place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=d.pk, quantity=q) for d, q in items],
        payment_method="card",
        coupon_code=coupon_code,
        actor="test",
    )


@pytest.mark.django_db
def test_prices_snapshot_and_coupon(tenant, menu, coupon):
    order = order_of(tenant, (menu["pizza"], 2), (menu["pasta"], 1), coupon_code="TEN")
    assert (order.subtotal, order.discount, order.total) == (
        Decimal("31.00"),
        Decimal("3.10"),
        Decimal("27.90"),
    )
    lines = list(order.lines.values_list("dish_name", "unit_price", "quantity", "line_total"))
    assert lines == [
        ("Pizza", Decimal("9.50"), 2, Decimal("19.00")),
        ("Pasta", Decimal("12.00"), 1, Decimal("12.00")),
    ]
    # the snapshot does not follow later price changes
    Dish.objects.for_tenant(tenant).filter(pk=menu["pizza"].pk).update(price=Decimal("99"))
    assert order.lines.first().unit_price == Decimal("9.50")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("side", "placed"),
    [("0.99", True), ("1.00", False)],
    ids=["at-the-limit", "a-cent-over"],
)
def test_an_order_comes_to_at_most_what_its_columns_hold(tenant, menu, coupon, side, placed):
    # given a dish at the menu's highest price, 100 portions of it (9,999,999,999.00), and a
    # side of 0.99 (the order's largest total, 9,999,999,999.99) or of 1.00 (a cent more)
    Dish.all_tenants.filter(pk=menu["pizza"].pk).update(price=Decimal("99999999.99"), stock=100)
    Dish.all_tenants.filter(pk=menu["pasta"].pk).update(price=Decimal(side))
    items = ((menu["pizza"], 100), (menu["pasta"], 1))
    if placed:
        order = order_of(tenant, *items, coupon_code="TEN")
        assert (order.subtotal, order.total) == (MAX_ORDER_AMOUNT, Decimal("8999999999.99"))
        return
    # then a cent over is refused before anything is written (it was a 500: numeric overflow),
    # however much the coupon would take off
    with pytest.raises(OrderingError) as err:
        order_of(tenant, *items, coupon_code="TEN")
    assert err.value.error_code == "ORDER_TOTAL_TOO_LARGE"
    assert err.value.extra["limit"] == "9999999999.99"
    assert Order.all_tenants.count() == 0
    assert list(Dish.all_tenants.order_by("name").values_list("stock", flat=True)) == [50, 100]
    assert Coupon.all_tenants.get(pk=coupon.pk).used_count == 0


@pytest.mark.django_db
def test_order_id_carries_shard_and_primary_dish_bucket(tenant, menu):
    order = order_of(tenant, (menu["pasta"], 1), (menu["pizza"], 1))
    parts = decode_order_id(order.pk)
    assert parts.shard == tenant_shard(tenant.pk)
    assert parts.dish_bucket == dish_bucket(menu["pasta"].pk)


@pytest.mark.django_db
def test_same_dish_lines_are_merged(tenant, menu):
    order = order_of(tenant, (menu["pizza"], 1), (menu["pizza"], 2))
    assert list(order.lines.values_list("quantity", flat=True)) == [3]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("unknown-dish", "DISH_NOT_FOUND"),
        ("other-tenant-dish", "DISH_NOT_FOUND"),
        ("inactive-dish", "DISH_UNAVAILABLE"),
        ("insufficient-stock", "INSUFFICIENT_STOCK"),
        ("bad-coupon", "COUPON_INVALID"),
        ("exhausted-coupon", "COUPON_EXHAUSTED"),
        ("too-many-merged", "QUANTITY_INVALID"),
    ],
)
def test_refusals_write_nothing(tenant, other_tenant, menu, coupon, case, code):
    foreign = Dish.objects.for_tenant(other_tenant).create(
        tenant=other_tenant, name="Foreign", price=Decimal("1"), stock=5
    )
    pizza, pasta = menu["pizza"], menu["pasta"]
    items = {
        "unknown-dish": [
            ItemRequest(dish_id=pizza.pk, quantity=1),
            ItemRequest(dish_id=999_999, quantity=1),
        ],
        "other-tenant-dish": [
            ItemRequest(dish_id=pizza.pk, quantity=1),
            ItemRequest(dish_id=foreign.pk, quantity=1),
        ],
        "inactive-dish": [
            ItemRequest(dish_id=pizza.pk, quantity=1),
            ItemRequest(dish_id=pasta.pk, quantity=1),
        ],
        "insufficient-stock": [
            ItemRequest(dish_id=pizza.pk, quantity=2),
            ItemRequest(dish_id=pasta.pk, quantity=51),
        ],
        "bad-coupon": [ItemRequest(dish_id=pizza.pk, quantity=1)],
        "exhausted-coupon": [ItemRequest(dish_id=pizza.pk, quantity=1)],
        "too-many-merged": [
            ItemRequest(dish_id=pizza.pk, quantity=60),
            ItemRequest(dish_id=pizza.pk, quantity=41),
        ],
    }[case]
    if case == "inactive-dish":
        Dish.objects.for_tenant(tenant).filter(pk=pasta.pk).update(active=False)
    if case == "exhausted-coupon":
        Coupon.objects.for_tenant(tenant).filter(pk=coupon.pk).update(used_count=2)
    coupon_code = {"bad-coupon": "NOPE", "exhausted-coupon": "TEN"}.get(case)
    with pytest.raises(OrderingError) as err:
        place_order(
            tenant=tenant, items=items, payment_method="card", coupon_code=coupon_code, actor="t"
        )
    assert err.value.error_code == code
    assert Order.all_tenants.count() == 0 and OrderLine.all_tenants.count() == 0
    assert sorted(Dish.all_tenants.values_list("stock", flat=True)) == [5, 50, 50]
    coupon.refresh_from_db()
    assert coupon.used_count == (2 if case == "exhausted-coupon" else 0)


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_orders_for_the_last_five_portions(tenant):
    # given a dish with 5 portions left
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Last", price=Decimal("5"), stock=5
    )
    # when 20 diners order one portion at the same instant
    results = race(20, lambda: order_of(tenant, (dish, 1)))
    # then exactly 5 orders exist, the rest were refused, and stock is 0, never below
    placed = [r for r in results if isinstance(r, Order)]
    refused = [r for r in results if isinstance(r, OrderingError)]
    assert (len(placed), len(refused)) == (5, 15), results
    assert {r.error_code for r in refused} == {"INSUFFICIENT_STOCK"}
    dish.refresh_from_db()
    assert dish.stock == 0
    assert Order.objects.for_tenant(tenant).count() == 5


@pytest.mark.django_db(transaction=True)
def test_concurrent_coupon_use_never_exceeds_limit(tenant, menu, coupon):
    results = race(10, lambda: order_of(tenant, (menu["pizza"], 1), coupon_code="TEN"))
    assert sum(isinstance(r, Order) for r in results) == 2
    coupon.refresh_from_db()
    assert coupon.used_count == 2
