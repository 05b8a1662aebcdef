"""Taking stock (ordering/services/stock.py): every dish of an order in one statement, rows
locked in primary key order, refusals named as before, no deadlock between opposite orders."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering.errors import OrderingError
from ordering.models import Dish, Order
from ordering.models.menu import MAX_STOCK
from ordering.services.lifecycle import cancel_order
from ordering.services.placing import ItemRequest, place_order
from tests.ordering.test_lifecycle import race


def dishes(tenant, *stocks: int, menu: str = "") -> list[Dish]:
    return [
        Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name=f"{menu}Dish {i}", price=Decimal(f"{i + 3}.25"), stock=stock
        )
        for i, stock in enumerate(stocks)
    ]


def order(tenant, *items: tuple[Dish, int]) -> Order:
    return place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=d.pk, quantity=q) for d, q in items],
        payment_method="card",
        actor="test",
    )


def stocks(menu: list[Dish]) -> list[int]:
    return [Dish.all_tenants.get(pk=d.pk).stock for d in menu]


@pytest.mark.django_db
def test_a_three_dish_order_takes_its_stock_in_one_statement(tenant):
    # given three dishes
    menu = dishes(tenant, 10, 10, 10)
    # when an order of all three is placed, listed against their ids' order
    with CaptureQueriesContext(connection) as queries:
        placed = order(tenant, (menu[2], 3), (menu[0], 1), (menu[1], 2))
    # then one statement touched the dishes, and it took each dish's portions
    touching = [q["sql"] for q in queries.captured_queries if Dish._meta.db_table in q["sql"]]
    assert len(touching) == 1, touching
    assert "ORDER BY dish.id FOR UPDATE" in touching[0]
    assert stocks(menu) == [9, 8, 7]
    # and every line froze its own dish's name and price
    lines = {line.dish_id: line for line in placed.lines.all()}
    for dish, quantity in ((menu[0], 1), (menu[1], 2), (menu[2], 3)):
        line = lines[dish.pk]
        assert (line.dish_name, line.unit_price, line.quantity) == (dish.name, dish.price, quantity)
        assert line.line_total == dish.price * quantity
    assert placed.subtotal == sum(line.line_total for line in lines.values())


@pytest.mark.django_db
def test_the_first_short_dish_by_id_is_named_and_no_stock_is_taken(tenant):
    # given three dishes, the second and third with one portion left
    menu = dishes(tenant, 10, 1, 1)
    # when an order wants two of each, the short ones listed first
    with pytest.raises(OrderingError) as refused:
        order(tenant, (menu[2], 2), (menu[1], 2), (menu[0], 2))
    # then the refusal names the first short dish by id, as checking one dish at a time would
    assert refused.value.error_code == "INSUFFICIENT_STOCK"
    assert refused.value.extra["dish_id"] == menu[1].pk
    # and the dish that had enough keeps its stock: the statement's decrement was rolled back
    assert stocks(menu) == [10, 1, 1]
    assert not Order.objects.for_tenant(tenant).exists()


@pytest.mark.django_db
def test_an_unknown_dish_among_several_is_named_before_a_short_one(tenant, other_tenant):
    # given two dishes of this tenant (one short) and one of another tenant
    menu = dishes(tenant, 10, 0)
    (foreign,) = dishes(other_tenant, 10)
    # when an order names all three
    with pytest.raises(OrderingError) as refused:
        order(tenant, (menu[0], 1), (menu[1], 1), (foreign, 1))
    # then the other tenant's dish is unknown here, and nothing is taken from any of them
    assert refused.value.error_code == "DISH_NOT_FOUND"
    assert refused.value.extra["dish_ids"] == [foreign.pk]
    assert stocks([*menu, foreign]) == [10, 0, 10]


@pytest.mark.django_db(transaction=True)
def test_opposite_orders_of_the_same_dishes_never_deadlock_or_oversell(tenant):
    for round_ in range(3):
        # given three dishes with 12 portions each
        menu = dishes(tenant, 12, 12, 12, menu=f"round {round_}: ")
        # when 16 diners order one of each at the same instant, half of them listing the
        # dishes the other way round
        turns = itertools.count()
        results = race(16, functools.partial(_one_of_each, tenant, menu, turns))
        # then 12 are placed and 4 refused for stock: no deadlock, no other error
        placed = [r for r in results if isinstance(r, Order)]
        refused = [r for r in results if not isinstance(r, Order)]
        assert len(placed) == 12, results
        assert all(
            isinstance(r, OrderingError) and r.error_code == "INSUFFICIENT_STOCK" for r in refused
        ), refused
        # and every portion taken belongs to a placed order
        assert stocks(menu) == [0, 0, 0]


def _one_of_each(tenant, menu: list[Dish], turns: Iterator[int]) -> Order:
    """One portion of each dish, listed in id order on even turns and reversed on odd ones."""
    listed = menu if next(turns) % 2 == 0 else menu[::-1]
    return order(tenant, *((dish, 1) for dish in listed))


@pytest.mark.django_db
def test_a_cancelled_three_dish_order_gives_its_stock_back_in_one_statement(tenant):
    # given a three-dish order placed, and one of its dishes taken off the menu since
    menu = dishes(tenant, 10, 10, 10)
    placed = order(tenant, (menu[2], 3), (menu[0], 1), (menu[1], 2))
    Dish.objects.for_tenant(tenant).filter(pk=menu[1].pk).update(active=False)
    # when the diner cancels it before paying
    with CaptureQueriesContext(connection) as queries:
        cancel_order(tenant=tenant, order_id=placed.pk, actor="test")
    # then one statement put every portion back, the inactive dish's too
    touching = [q["sql"] for q in queries.captured_queries if Dish._meta.db_table in q["sql"]]
    assert len(touching) == 1, touching
    assert stocks(menu) == [10, 10, 10]


@pytest.mark.django_db(transaction=True)
def test_orders_and_cancels_of_the_same_dishes_never_deadlock(tenant):
    # given three dishes and 8 placed orders of all three, listed in both orders
    menu = dishes(tenant, 100, 100, 100)
    turns = itertools.count()
    placed = [_one_of_each(tenant, menu, turns) for _ in range(8)]
    # when those 8 are cancelled while 8 more are placed, at the same instant
    jobs = iter(
        [functools.partial(_cancel, tenant, o) for o in placed]
        + [functools.partial(_one_of_each, tenant, menu, turns)] * 8
    )
    results = race(16, lambda: next(jobs)())
    # then every one succeeded, and the stock counts the 8 orders still standing
    assert all(isinstance(r, Order) for r in results), results
    assert stocks(menu) == [92, 92, 92]


def _cancel(tenant, placed: Order) -> Order:
    return cancel_order(tenant=tenant, order_id=placed.pk, actor="test")


@pytest.mark.django_db
@pytest.mark.parametrize("dish_count", [1, 2])
def test_a_give_back_stops_at_the_most_a_dish_may_hold(tenant, dish_count):
    # given an order holding 2 portions of each dish, whose stock the merchant then set to the
    # most a dish may hold (the menu's schema says at most 1,000,000)
    menu = dishes(tenant, *[10] * dish_count)
    placed = order(tenant, *[(dish, 2) for dish in menu])
    Dish.objects.for_tenant(tenant).update(stock=MAX_STOCK)
    # when it is cancelled, then the portions go back up to that bound, not past it
    cancel_order(tenant=tenant, order_id=placed.pk, actor="test")
    assert stocks(menu) == [MAX_STOCK] * dish_count
