"""Using a coupon (ordering/services/placing._use_coupon): one statement counts a use and returns
the coupon; a refusal says whether the coupon cannot be used at all or is used up."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ordering.errors import OrderingError
from ordering.models import Coupon, Dish, Order
from ordering.services.placing import ItemRequest, place_order
from tests.conftest import api_for


def coupon_of(tenant, code: str = "SAVE", **fields) -> Coupon:
    values = {"kind": Coupon.Kind.AMOUNT, "value": Decimal("2.50"), "max_uses": 3} | fields
    return Coupon.objects.for_tenant(tenant).create(tenant=tenant, code=code, **values)


def order_with(tenant, menu, code: str) -> Order:
    return place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pizza"].pk, quantity=2)],
        payment_method="card",
        coupon_code=code,
        actor="test",
    )


def used_count(coupon: Coupon) -> int:
    return Coupon.all_tenants.get(pk=coupon.pk).used_count


@pytest.mark.django_db
def test_a_use_is_counted_in_one_statement_that_returns_the_coupon(tenant, menu):
    # given a coupon of 2.50 off, used once already, valid for another hour
    coupon = coupon_of(tenant, used_count=1, valid_until=timezone.now() + timedelta(hours=1))
    # when an order of 2 x 9.50 uses it
    with CaptureQueriesContext(connection) as queries:
        placed = order_with(tenant, menu, "SAVE")
    # then one statement read and counted the coupon
    touching = [q["sql"] for q in queries.captured_queries if "ordering_coupon" in q["sql"]]
    assert len(touching) == 1, touching
    assert touching[0].startswith("UPDATE")
    # and the order carries the coupon and its discount, and the use is counted
    assert (placed.coupon_id, placed.subtotal, placed.discount, placed.total) == (
        coupon.pk,
        Decimal("19.00"),
        Decimal("2.50"),
        Decimal("16.50"),
    )
    assert used_count(coupon) == 2


@pytest.mark.django_db
def test_a_coupon_without_a_limit_or_an_end_is_counted_every_time(tenant, menu):
    coupon = coupon_of(tenant, kind=Coupon.Kind.PERCENT, value=Decimal("10"), max_uses=None)
    for _ in range(3):
        assert order_with(tenant, menu, "SAVE").discount == Decimal("1.90")
    assert used_count(coupon) == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"active": False}, "COUPON_INVALID"),
        ({"valid_until": timezone.now() - timedelta(seconds=1)}, "COUPON_INVALID"),
        ({"used_count": 3}, "COUPON_EXHAUSTED"),
        ({"used_count": 3, "active": False}, "COUPON_INVALID"),
        ({"used_count": 3, "valid_until": timezone.now() - timedelta(days=1)}, "COUPON_INVALID"),
    ],
    ids=["inactive", "expired", "used-up", "used-up-and-inactive", "used-up-and-expired"],
)
def test_a_coupon_that_cannot_be_used_is_refused_and_not_counted(tenant, menu, fields, code):
    # given a coupon that is off, past its end or used up (3 of 3)
    coupon = coupon_of(tenant, **fields)
    before = used_count(coupon)
    # when an order names it
    with pytest.raises(OrderingError) as refused:
        order_with(tenant, menu, "SAVE")
    # then it is refused: a coupon off or past its end is invalid before it is used up
    assert refused.value.error_code == code
    # and nothing is written or counted, the stock taken before it is given back
    assert used_count(coupon) == before
    assert not Order.objects.for_tenant(tenant).exists()
    assert Order.all_tenants.count() == 0
    menu["pizza"].refresh_from_db()
    assert menu["pizza"].stock == 50


@pytest.mark.parametrize(
    ("percent", "subtotal", "discount"),
    [
        ("10", "19.05", "1.91"),  # 1.905: half up (half to even gave 1.90)
        ("10", "0.25", "0.03"),  # 0.025
        ("10", "0.35", "0.04"),  # 0.035
        ("12.5", "0.20", "0.03"),  # 0.025
        ("33.33", "10.00", "3.33"),  # 3.333: down
        ("100", "19.05", "19.05"),  # all of it
        ("0.01", "0.01", "0.00"),  # less than half a cent: nothing
    ],
)
def test_a_percentage_is_rounded_to_the_cent_half_up(percent, subtotal, discount):
    coupon = Coupon(kind=Coupon.Kind.PERCENT, value=Decimal(percent))
    assert coupon.discount_for(Decimal(subtotal)) == Decimal(discount)


@pytest.mark.django_db
def test_a_percentage_off_an_order_is_rounded_half_up_in_its_total(tenant, menu):
    # given a coupon of 10 % and an order of 19.05 (2 x 9.50 and 1 x 0.05)
    coupon_of(tenant, kind=Coupon.Kind.PERCENT, value=Decimal("10"))
    Dish.all_tenants.filter(pk=menu["pasta"].pk).update(price=Decimal("0.05"))
    placed = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pizza"].pk, quantity=2), ItemRequest(menu["pasta"].pk, 1)],
        payment_method="card",
        coupon_code="SAVE",
        actor="test",
    )
    # then 1.91 is taken off, and the diner pays 17.14
    assert (placed.subtotal, placed.discount, placed.total) == (
        Decimal("19.05"),
        Decimal("1.91"),
        Decimal("17.14"),
    )


@pytest.mark.django_db
@pytest.mark.parametrize("typed", ["save", "Save", " save "], ids=["lower", "mixed", "spaced"])
def test_a_code_typed_in_lower_case_is_the_coupon_the_dashboard_wrote(tenant, menu, typed):
    # given a coupon the dashboard wrote in capitals, when a diner types it otherwise
    coupon = coupon_of(tenant)
    api = api_for(tenant, diner="diner-1")
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": 2}],
        "payment_method": "card",
        "coupon_code": typed,
    }
    placed = api.post("/api/v1/orders/", body, format="json", headers={"Idempotency-Key": "k"})
    # then it is that coupon, counted once (it was 422 COUPON_INVALID)
    assert placed.status_code == 201, placed.content
    assert (placed.json()["coupon_code"], placed.json()["discount"]) == ("SAVE", "2.50")
    assert used_count(coupon) == 1


@pytest.mark.django_db
def test_another_tenants_coupon_is_unknown_here(tenant, other_tenant, menu):
    foreign = coupon_of(other_tenant, code="THEIRS")
    with pytest.raises(OrderingError) as refused:
        order_with(tenant, menu, "THEIRS")
    assert refused.value.error_code == "COUPON_INVALID"
    assert used_count(foreign) == 0
