"""Short order numbers (#0427): one sequence per tenant and business day, handed out by the
database however many orders arrive at once, with no gaps left by refused orders."""

from __future__ import annotations

import threading
from datetime import date

import pytest
from django.db import connection
from django.utils import timezone

from ordering.errors import OrderingError
from ordering.models import Order
from ordering.order_numbers import numbered
from ordering.services.placing import ItemRequest, place_order
from tests.conftest import menu_for

THREADS = 12


def place(tenant, dish, quantity: int = 1) -> Order:
    return place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=quantity)],
        payment_method="card",
        actor="test",
    )


@pytest.mark.django_db
def test_numbers_count_up_per_tenant_and_a_refused_order_leaves_no_gap(tenant, other_tenant):
    mine, theirs = menu_for(tenant, stock=5), menu_for(other_tenant)
    first = place(tenant, mine["pizza"])
    with pytest.raises(OrderingError):
        place(tenant, mine["pizza"], quantity=99)  # refused after its number was taken
    second = place(tenant, mine["pasta"])
    elsewhere = place(other_tenant, theirs["pizza"])
    assert (first.number, second.number, elsewhere.number) == (1, 2, 1)
    assert (first.number_label, second.number_label) == ("#0001", "#0002")
    assert first.business_day == timezone.localdate(timezone=tenant.zone)


def take_number(tenant, day: date) -> int:
    """The upsert that leads an order's statement, run on its own."""
    upsert = numbered(tenant=tenant, day=day)
    with connection.cursor() as cursor:
        cursor.execute(upsert.sql, list(upsert.params))
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_each_business_day_starts_again_at_one(tenant):
    assert [take_number(tenant, date(2026, 3, 1)) for _ in range(3)] == [1, 2, 3]
    assert take_number(tenant, date(2026, 3, 2)) == 1


@pytest.mark.django_db
def test_the_business_day_is_the_tenants_calendar_day(make_tenant):
    # two restaurants 25 hours apart: never on the same calendar day
    east = make_tenant(time_zone="Pacific/Kiritimati")  # UTC+14
    west = make_tenant(time_zone="Pacific/Pago_Pago")  # UTC-11
    before = timezone.now()
    east_order = place(east, menu_for(east)["pizza"])
    west_order = place(west, menu_for(west)["pizza"])
    after = timezone.now()
    assert east_order.business_day in {timezone.localdate(t, east.zone) for t in (before, after)}
    assert west_order.business_day in {timezone.localdate(t, west.zone) for t in (before, after)}
    assert east_order.business_day > west_order.business_day


@pytest.mark.django_db(transaction=True)
def test_concurrent_orders_get_distinct_consecutive_numbers(tenant):
    dishes = menu_for(tenant, stock=100)
    barrier = threading.Barrier(THREADS)
    placed: list[Order] = []
    errors: list[Exception] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            dish = dishes["pizza"] if i % 2 else dishes["pasta"]
            placed.append(place(tenant, dish))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(o.number for o in placed) == list(range(1, THREADS + 1))
    stored = Order.objects.for_tenant(tenant).values_list("number", flat=True)
    assert sorted(stored) == list(range(1, THREADS + 1))
