"""The INSERT text a process keeps per batch shape (ordering/one_statement.py) is what
Django's insert compiler builds, and the values sent with it are the ones it would send."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from unittest import mock

import pytest
from django.db import DEFAULT_DB_ALIAS
from django.db.models.sql import InsertQuery

from ordering import one_statement
from ordering.models import Order, OrderLine, OrderStatus, OrderTransition
from ordering.one_statement import Leading

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def order_rows(tenant, menu, *, order_id: int, lines: int, note: str):
    """An unsaved order numbered by a leading statement, its lines and first transition."""
    leading = Leading(sql="SELECT 7", params=())
    order = Order(
        id=order_id,
        tenant=tenant,
        number=leading.placeholder,
        business_day=NOW.date(),
        payment_method="card",
        subtotal=Decimal("9.50"),
        discount=Decimal("0.00"),
        total=Decimal("9.50"),
        note=note,
    )
    dishes = [menu["pizza"], menu["pasta"]][:lines]
    rows = [
        OrderLine(
            tenant=tenant,
            order=order,
            dish_id=dish.pk,
            dish_name=dish.name,
            unit_price=dish.price,
            quantity=q + 1,
            line_total=dish.price * (q + 1),
        )
        for q, dish in enumerate(dishes)
    ]
    created = OrderTransition(
        tenant=tenant, order=order, from_status="", to_status=OrderStatus.CREATED, actor=note
    )
    return [order], rows, [created]


def as_django_compiles_it(batch):
    """The statement Django's insert compiler builds for ``batch`` (the module's own compile
    step is not used, so a mistake there cannot hide)."""
    model = type(batch[0])
    returns_pk = batch[0].pk is None
    query = InsertQuery(model)
    query.insert_values(
        [f for f in model._meta.concrete_fields if not (returns_pk and f is model._meta.pk)], batch
    )
    compiler = query.get_compiler(using=DEFAULT_DB_ALIAS)
    if returns_pk:
        compiler.returning_fields = [model._meta.pk]
    [(sql, params)] = compiler.as_sql()
    return sql, list(params), returns_pk


@pytest.fixture
def no_shapes_known(monkeypatch):
    monkeypatch.setattr(one_statement, "_SQL_BY_SHAPE", {})


@pytest.mark.django_db
@pytest.mark.usefixtures("no_shapes_known")
@pytest.mark.parametrize("lines", [1, 2])
def test_a_known_shape_sends_what_djangos_compiler_builds(tenant, menu, lines):
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        # given the shapes of an order's batches compiled once (the first order)
        for batch in order_rows(tenant, menu, order_id=1, lines=lines, note="first"):
            one_statement._insert_sql(batch, using=DEFAULT_DB_ALIAS)
        # when another order of the same shapes, with other values, is written
        second = order_rows(tenant, menu, order_id=2, lines=lines, note="second")
        kept = [one_statement._insert_sql(batch, using=DEFAULT_DB_ALIAS) for batch in second]
        # then each statement and its values are what Django's compiler makes of that batch
        compiled = [as_django_compiles_it(batch) for batch in second]
        assert kept == compiled
    # converted as Django converts them for the driver (e.g. psycopg's Int8 for a big integer)
    assert [[type(p) for p in params] for _, params, _ in kept] == [
        [type(p) for p in params] for _, params, _ in compiled
    ]
    assert kept[0][1][0] == 2  # the order's id: this batch's values, not the first one's
    assert "second" in kept[0][1]
    # and the expression (the number the leading statement returns) is in the text, once
    assert kept[0][0].count("(SELECT * FROM lead)") == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("no_shapes_known")
def test_each_row_count_is_a_shape_of_its_own(tenant, menu):
    # given the shapes of a one-line order known
    _order, one_line, _log = order_rows(tenant, menu, order_id=1, lines=1, note="one")
    one_line_sql, _, _ = one_statement._insert_sql(one_line, using=DEFAULT_DB_ALIAS)
    # when two-line orders are written (the second from the kept text)
    for order_id in (2, 3):
        _order, two_lines, _log = order_rows(tenant, menu, order_id=order_id, lines=2, note="two")
        sql, params, _ = one_statement._insert_sql(two_lines, using=DEFAULT_DB_ALIAS)
        # then their lines' statement is not the one-line one, and is Django's for two lines,
        # with a value for each placeholder (an array per column where Django uses UNNEST)
        assert sql != one_line_sql
        assert (sql, params, True) == as_django_compiles_it(two_lines)
        assert sql.count("%s") == len(params)


@pytest.mark.django_db
@pytest.mark.usefixtures("no_shapes_known")
def test_an_expression_among_the_values_is_part_of_the_shape(tenant, menu):
    # given an order numbered by a leading statement, written once
    [numbered], _lines, _log = order_rows(tenant, menu, order_id=1, lines=1, note="lead")
    one_statement._insert_sql([numbered], using=DEFAULT_DB_ALIAS)
    # when an order whose number is a plain value is written, twice
    for order_id in (2, 3):
        [plain], _lines, _log = order_rows(tenant, menu, order_id=order_id, lines=1, note="plain")
        plain.number = 41
        with mock.patch("django.utils.timezone.now", return_value=NOW):
            sql, params, _ = one_statement._insert_sql([plain], using=DEFAULT_DB_ALIAS)
            # then it is sent as Django compiles it: the number a value, not the expression
            assert (sql, params, False) == as_django_compiles_it([plain])
        assert "(SELECT * FROM lead)" not in sql
        assert 41 in params
