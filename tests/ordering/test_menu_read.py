"""The menu's read: what ``DishSerializer`` writes, from one statement compiled once per process.

Every diner's app reads the menu whenever it opens. It is read as plain values and written
without a serializer per dish (``ordering.selectors.menu_rows``, ``ordering.api.rendering
.menu_entry``); these tests hold it to the serializer's answer and to one read.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering import prefetch
from ordering.api.serializers import DishSerializer
from ordering.models import Dish
from ordering.selectors import menu_of, menu_rows
from tests.conftest import api_for
from tests.support.compiles import compiled_models

pytestmark = pytest.mark.django_db


def dishes(tenant, *rows):
    for name, price, stock, active, description in rows:
        Dish.objects.for_tenant(tenant).create(
            tenant=tenant,
            name=name,
            price=Decimal(price),
            stock=stock,
            active=active,
            description=description,
        )


@pytest.fixture
def menus(tenant, other_tenant):
    dishes(
        tenant,
        ("Tiramisu", "6", 3, True, ""),
        ("Arancini", "0.50", 0, True, "Sold out today"),  # available: no
        ("Zuppa", "12.05", 9, False, "Off the menu"),  # inactive: not shown
        ("Margherita", "99999999.99", 2**31 - 1, True, "Tomato, mozzarella, «basilico»"),
    )
    dishes(other_tenant, ("Burger", "11.00", 5, True, "Another restaurant's"))


def test_the_menu_is_what_the_serializer_writes(tenant, other_tenant, menus):
    for who in (tenant, other_tenant):
        answer = api_for(who).get("/api/v1/menu/")
        assert answer.status_code == 200
        assert answer.json() == DishSerializer(menu_of(tenant=who), many=True).data
    shown = api_for(tenant).get("/api/v1/menu/").json()
    assert [(d["name"], d["price"], d["available"]) for d in shown] == [
        ("Arancini", "0.50", False),
        ("Margherita", "99999999.99", True),
        ("Tiramisu", "6.00", True),
    ]


def test_the_menu_is_one_statement_compiled_once_per_process(
    tenant, other_tenant, menus, monkeypatch
):
    monkeypatch.setattr(prefetch, "_VALUES_READS", {})
    with compiled_models() as compiled, CaptureQueriesContext(connection) as queries:
        read = [menu_rows(tenant=who) for who in (tenant, other_tenant, tenant)]
    assert compiled.count(Dish) == 1
    assert len(queries) == 3
    assert [row[1] for row in read[1]] == ["Burger"]
    assert read[0] == read[2] == list(menu_of(tenant=tenant).values_list("id", *NAMED))


NAMED = ("name", "description", "price", "stock")


def test_a_diner_session_reads_the_same_menu_with_one_statement(tenant, menus):
    api_for(tenant).get("/api/v1/menu/")  # the statement is compiled and kept
    with CaptureQueriesContext(connection) as queries:
        answer = api_for(tenant, diner="diner-1").get("/api/v1/menu/")
    assert answer.status_code == 200 and len(answer.json()) == 3
    menu_reads = [q["sql"] for q in queries if "ordering_dish" in q["sql"]]
    assert len(menu_reads) == 1
