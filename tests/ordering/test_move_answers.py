"""The answer of a move (pay, cancel, a merchant's move) is the order as the database then
holds it, rendered from the order the service saved: the order is not read again, and its
tenant is the caller's, not read either."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering.models import Order, OrderStatus
from tenants.models import ApiClient
from tests.conftest import api_for
from tests.ordering.test_lifecycle import new_order

pytestmark = pytest.mark.django_db(transaction=True)  # as served: no test transaction around it


def moved(api, path: str, body: dict | None = None):
    """POST ``path`` with a fresh key; the answer and the statements it sent."""
    with CaptureQueriesContext(connection) as queries:
        answer = api.post(path, body or {}, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    return answer, [q["sql"] for q in queries.captured_queries]


def reads_of(statements: list[str], table: str) -> list[str]:
    """The statements that read whole rows of ``table`` (as loading a model instance does;
    the engine's per-tenant settings read single columns of the tenant, and are not these)."""
    return [sql for sql in statements if sql.startswith(f'SELECT "{table}"."id", ')]


@pytest.mark.parametrize(
    ("who", "status", "path", "body", "after"),
    [
        ("diner", OrderStatus.CREATED, "pay", None, OrderStatus.PAYING),
        ("diner", OrderStatus.CREATED, "cancel", None, OrderStatus.CANCELLED),
        ("diner", OrderStatus.PAID, "cancel", None, OrderStatus.CANCELLING),
        ("merchant", OrderStatus.PAID, "transition", {"to": "ACCEPTED"}, OrderStatus.ACCEPTED),
    ],
    ids=["pay", "cancel-unpaid", "cancel-paid", "accept"],
)
def test_a_move_answers_the_order_as_read_back_without_reading_it_again(
    tenant, menu, who, status, path, body, after
):
    # given an order of the caller (a diner's own, or any of the merchant's)
    api = (
        api_for(tenant, diner="diner-1")
        if who == "diner"
        else api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    )
    order = new_order(tenant, menu, status)
    Order.all_tenants.filter(pk=order.pk).update(diner_id="diner-1")
    api.get("/api/v1/menu/")  # the caller's credential checked once already
    # when the caller moves it
    answer, statements = moved(api, f"/api/v1/orders/{order.pk}/{path}/", body)
    # then the answer is the order as a read afterwards shows it, in its new status
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == after
    assert answer.json() == api.get(f"/api/v1/orders/{order.pk}/").json()
    # and the order was read once, by the move itself, and its tenant not at all
    assert len(reads_of(statements, "ordering_order")) == 1, statements
    assert reads_of(statements, "tenants_tenant") == [], statements


def diners_order_moved(tenant, menu, path: str) -> list[str]:
    """A diner's new order of 1 pizza, moved by the diner by ``path``: the statements sent."""
    api = api_for(tenant, diner="diner-1")
    order = new_order(tenant, menu)
    Order.all_tenants.filter(pk=order.pk).update(diner_id="diner-1")
    answer, statements = moved(api, f"/api/v1/orders/{order.pk}/{path}/")
    assert answer.status_code == 200, answer.content
    return statements


def test_a_pay_reads_the_payments_with_the_order_and_writes_by_statements_built_once(tenant, menu):
    # when a diner pays an order
    statements = diners_order_moved(tenant, menu, "pay")
    # then the move's condition (no payment attached) read the payments read with the order,
    # in its query: no statement of its own before the payment is written
    [read] = reads_of(statements, "ordering_order")
    assert 'FROM "ordering_payment"' in read
    write = next(i for i, sql in enumerate(statements) if 'INSERT INTO "ordering_payment"' in sql)
    assert [sql for sql in statements[:write] if '"ordering_payment"' in sql] == [read]
    # and the move's conditional update is the one built once (ordering/services/lifecycle.py),
    # not the ORM's, returning the diner's fields as the row holds them (an erasure may have
    # renamed it since the order was read)
    [update] = [sql for sql in statements if sql.startswith('UPDATE "ordering_order"')]
    assert 'WHERE "id" = ' in update, update
    assert update.endswith(
        '"status" = \'CREATED\' RETURNING "diner_id", "note", "contact_phone", "delivery_address"'
    ), update
    # and its log row and its payment went through the kept INSERT shapes
    # (ordering/one_statement.py), not the ORM compiling each INSERT afresh
    for table in ("ordering_ordertransition", "ordering_payment"):
        [insert] = [sql for sql in statements if f'INSERT INTO "{table}"' in sql]
        assert insert.startswith(f'WITH b0 AS (INSERT INTO "{table}"'), insert


def test_an_unpaid_cancel_works_from_the_lines_and_payments_read_with_the_order(tenant, menu):
    menu["pizza"].refresh_from_db()
    stock = menu["pizza"].stock
    # when a diner cancels an unpaid order of 1 pizza
    statements = diners_order_moved(tenant, menu, "cancel")
    # then its portion is back, from the lines read in the order's query: no read of the
    # lines of its own before the stock's statement
    menu["pizza"].refresh_from_db()
    assert menu["pizza"].stock == stock
    [read] = reads_of(statements, "ordering_order")
    assert 'FROM "ordering_orderline"' in read
    give_back = next(i for i, sql in enumerate(statements) if 'UPDATE "ordering_dish"' in sql)
    assert [sql for sql in statements[:give_back] if '"ordering_orderline"' in sql] == [read]
    # and, the order having no payment (its payments read with it), no payment is updated
    assert 'FROM "ordering_payment"' in read
    assert [sql for sql in statements if sql.startswith('UPDATE "ordering_payment"')] == []
