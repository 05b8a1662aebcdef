"""Menu and coupon services: the database decides duplicates and stale stock edits."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.db import connection

from ordering.models import Coupon, Dish
from ordering.services import menu as menu_services
from ordering.services.menu import (
    MenuError,
    MenuErrorCode,
    create_coupon,
    create_dish,
    deactivate_coupon,
    update_dish,
)
from tests.dashboard.conftest import form_token


def code_of(call) -> MenuErrorCode:
    with pytest.raises(MenuError) as caught:
        call()
    return caught.value.code


@pytest.mark.django_db
def test_dish_names_are_unique_per_tenant(tenant, other_tenant):
    create_dish(tenant=tenant, name="Soup", price=Decimal("4"), stock=1)
    again = lambda: create_dish(tenant=tenant, name="Soup", price=Decimal("5"), stock=2)  # noqa: E731
    assert code_of(again) == MenuErrorCode.DUPLICATE_NAME
    assert create_dish(tenant=other_tenant, name="Soup", price=Decimal("4"), stock=1).pk
    assert Dish.objects.for_tenant(tenant).get().price == Decimal("4")


@pytest.mark.django_db
def test_stock_is_only_overwritten_if_it_is_what_the_merchant_saw(tenant, menu):
    pizza = menu["pizza"]
    stale = lambda: update_dish(  # noqa: E731
        tenant=tenant, dish_id=pizza.pk, price=Decimal("1"), active=True, stock=5, stock_seen=49
    )
    assert code_of(stale) == MenuErrorCode.STOCK_CHANGED
    pizza.refresh_from_db()
    assert (pizza.stock, pizza.price) == (50, Decimal("9.50"))
    update_dish(
        tenant=tenant, dish_id=pizza.pk, price=Decimal("1"), active=False, stock=5, stock_seen=50
    )
    pizza.refresh_from_db()
    assert (pizza.stock, pizza.price, pizza.active) == (5, Decimal("1"), False)


@pytest.mark.django_db
def test_another_tenants_dish_or_coupon_is_not_found(tenant, other_tenant, menu, coupon):
    edit = lambda: update_dish(  # noqa: E731
        tenant=other_tenant,
        dish_id=menu["pizza"].pk,
        price=Decimal("0"),
        active=False,
        stock=0,
        stock_seen=50,
    )
    assert code_of(edit) == MenuErrorCode.NOT_FOUND
    off = lambda: deactivate_coupon(tenant=other_tenant, coupon_id=coupon.pk)  # noqa: E731
    assert code_of(off) == MenuErrorCode.NOT_FOUND
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).active
    assert Coupon.all_tenants.get(pk=coupon.pk).active


@pytest.mark.django_db
def test_coupons_are_unique_per_tenant_and_deactivate_once(tenant, coupon):
    dup = lambda: create_coupon(tenant=tenant, code="TEN", kind="amount", value=Decimal("1"))  # noqa: E731
    assert code_of(dup) == MenuErrorCode.DUPLICATE_CODE
    too_much = lambda: create_coupon(  # noqa: E731
        tenant=tenant, code="X", kind="percent", value=Decimal("101")
    )
    assert code_of(too_much) == MenuErrorCode.INVALID
    first, did = deactivate_coupon(tenant=tenant, coupon_id=coupon.pk)
    assert first.active is False and did
    again, did_again = deactivate_coupon(tenant=tenant, coupon_id=coupon.pk)
    assert again.active is False and not did_again


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_of_the_same_dish_make_one(tenant):
    """Eight threads, eight connections, one name: the unique constraint lets one through."""
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def create() -> None:
        try:
            barrier.wait()
            create_dish(tenant=tenant, name="Ramen", price=Decimal("12"), stock=3)
            outcomes.append("created")
        except MenuError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == ["DUPLICATE_NAME"] * 7 + ["created"]
    assert Dish.objects.for_tenant(tenant).filter(name="Ramen").count() == 1


@pytest.mark.django_db
def test_a_tenant_s_menu_holds_at_most_the_limit_of_dishes(tenant, other_tenant, monkeypatch):
    """Every stored input has a bound: a merchant could add dishes without end, and the menu,
    which anyone holding the restaurant's public key reads whole, grew with them (2,000
    dishes: a 590 kB answer per read). Red before: a fourth dish was added."""
    # given a tenant whose menu is full, and another tenant's as full
    monkeypatch.setattr(menu_services, "MAX_DISHES_PER_TENANT", 3)
    for n in range(3):
        create_dish(tenant=tenant, name=f"Dish {n}", price=Decimal("1"), stock=1)
        create_dish(tenant=other_tenant, name=f"Dish {n}", price=Decimal("1"), stock=1)
    # when one more dish is added
    more = lambda: create_dish(tenant=tenant, name="One more", price=Decimal("1"), stock=1)  # noqa: E731
    with pytest.raises(MenuError) as caught:
        more()
    # then it is refused, on the form's name, saying the bound, and nothing is written
    assert caught.value.code == MenuErrorCode.MENU_FULL
    assert "at most 3 dishes" in caught.value.message
    assert caught.value.message.endswith("has them all: nothing was added.")
    assert Dish.objects.for_tenant(tenant).count() == 3
    # and a dish taken off the menu still counts (it is stored, and can be put back on)
    Dish.objects.for_tenant(tenant).filter(name="Dish 0").update(active=False)
    assert code_of(more) == MenuErrorCode.MENU_FULL


@pytest.mark.django_db
def test_the_menu_page_says_the_menu_is_full(merchant, mine, monkeypatch):
    """The dashboard's add form answers 400 with the bound on the name field."""
    held = Dish.objects.for_tenant(mine.tenant).count()
    monkeypatch.setattr(menu_services, "MAX_DISHES_PER_TENANT", held)
    token = form_token(merchant.get("/dashboard/menu/").content.decode())
    posted = {"name": "One more", "price": "1.00", "stock": "1", "idempotency_key": token}
    answer = merchant.post("/dashboard/menu/", posted)
    assert answer.status_code == 400
    assert answer.context["form"].errors["name"] == [menu_services._menu_full().message]
    assert Dish.objects.for_tenant(mine.tenant).count() == held


def test_the_documented_bound_of_dishes_is_1000():
    """README (Menu & stock) names this bound."""
    assert menu_services.MAX_DISHES_PER_TENANT == 1_000


@pytest.mark.django_db
def test_a_tenant_holds_at_most_the_limit_of_coupons(tenant, other_tenant, monkeypatch):
    """A merchant could create coupons without end. Red before: a fourth coupon was
    created. Deactivated ones do not count: deactivating one makes room (red when they
    counted: a restaurant at the bound could never create a coupon again)."""
    # given a tenant holding the most active coupons, and another tenant as full
    monkeypatch.setattr(menu_services, "MAX_COUPONS_PER_TENANT", 3)
    for n in range(3):
        create_coupon(tenant=tenant, code=f"C{n}", kind="amount", value=Decimal("1"))
        create_coupon(tenant=other_tenant, code=f"C{n}", kind="amount", value=Decimal("1"))
    # when one more is created
    with pytest.raises(MenuError) as caught:
        create_coupon(tenant=tenant, code="MORE", kind="amount", value=Decimal("1"))
    # then it is refused on the code's field, saying the bound, and nothing is written
    assert (caught.value.code, caught.value.field) == (MenuErrorCode.COUPONS_FULL, "code")
    assert "at most 3 active coupons" in caught.value.message
    assert Coupon.objects.for_tenant(tenant).count() == 3
    # and once one is deactivated, it is created
    deactivate_coupon(tenant=tenant, coupon_id=Coupon.objects.for_tenant(tenant).first().pk)
    create_coupon(tenant=tenant, code="MORE", kind="amount", value=Decimal("1"))
    assert Coupon.objects.for_tenant(tenant).filter(active=True).count() == 3


def test_the_documented_bound_of_coupons_is_1000():
    """README (Coupons) names this bound."""
    assert menu_services.MAX_COUPONS_PER_TENANT == 1_000


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("limit", "create", "full"),
    [
        pytest.param(
            "MAX_DISHES_PER_TENANT",
            lambda tenant, n: create_dish(
                tenant=tenant, name=f"Dish {n}", price=Decimal("12"), stock=3
            ),
            "MENU_FULL",
            id="dishes",
        ),
        pytest.param(
            "MAX_COUPONS_PER_TENANT",
            lambda tenant, n: create_coupon(
                tenant=tenant, code=f"C{n}", kind="amount", value=Decimal("1")
            ),
            "COUPONS_FULL",
            id="coupons",
        ),
    ],
)
def test_concurrent_creates_of_different_rows_stop_at_the_limit(
    tenant, monkeypatch, limit, create, full
):
    """Eight threads, eight connections, eight names, room for three: the bound holds when
    the creates race (a count read before the insert would let each of them through)."""
    monkeypatch.setattr(menu_services, limit, 3)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def create_one(n: int) -> None:
        try:
            barrier.wait()
            create(tenant, n)
            outcomes.append("created")
        except MenuError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create_one, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == [full] * 5 + ["created"] * 3
    model = Dish if full == "MENU_FULL" else Coupon
    assert model.objects.for_tenant(tenant).count() == 3
