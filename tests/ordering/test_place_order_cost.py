"""What placing an order costs in SQL, and that the answer rendered from the objects in hand
is the order as the database holds it."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering.api.serializers import OrderDetailSerializer
from ordering.models import Order
from ordering.services.placing import ItemRequest, place_order
from tests.conftest import api_for


def place(api, menu, *, coupon_code=None, extra_dish=False):
    items = [{"dish_id": menu["pizza"].pk, "quantity": 2}]
    if extra_dish:
        items.append({"dish_id": menu["pasta"].pk, "quantity": 1})
    body = {"items": items, "payment_method": "card", "note": "n"}
    if coupon_code:
        body["coupon_code"] = coupon_code
    return api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)


@pytest.mark.django_db
@pytest.mark.parametrize("shape", ["one line", "two lines and a coupon"])
def test_the_answer_is_the_order_as_read_back(tenant, menu, coupon, shape):
    # given a diner's session
    api = api_for(tenant, diner="diner-1")
    full = shape != "one line"
    # when an order is placed
    placed = place(api, menu, coupon_code="TEN" if full else None, extra_dish=full)
    assert placed.status_code == 201, placed.content
    # then its answer is what reading the order back shows, field for field
    read_back = api.get(f"/api/v1/orders/{placed.json()['id']}/")
    assert read_back.status_code == 200
    assert placed.json() == read_back.json()
    assert len(placed.json()["lines"]) == (2 if full else 1)
    assert placed.json()["transitions"][0]["to_status"] == "CREATED"


@pytest.mark.django_db
def test_the_placed_order_renders_every_merchant_field_without_a_query(tenant, menu, coupon):
    # given an order just placed (two dishes, a coupon)
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pasta"].pk, 1), ItemRequest(menu["pizza"].pk, 3)],
        payment_method="card",
        coupon_code="TEN",
        actor="api:abc/diner:d1",
    )
    # when the merchant's shape of it is rendered from the object in hand
    with CaptureQueriesContext(connection) as queries:
        in_hand = OrderDetailSerializer(order).data
    # then no query ran, and it equals the order read back from the database
    assert queries.captured_queries == []
    assert in_hand == OrderDetailSerializer(Order.objects.for_tenant(tenant).get(pk=order.pk)).data


@pytest.mark.django_db(transaction=True)  # as served: no test transaction around it
def test_a_one_line_order_is_four_statements_in_one_transaction(tenant, menu, engine_mode):
    # given a diner whose session was checked once already (and whose process leased its
    # order-ID worker id)
    api = api_for(tenant, diner="diner-1")
    assert place(api, menu).status_code == 201
    # when they place a one-line order
    with CaptureQueriesContext(connection) as queries:
        placed = place(api, menu)
    assert placed.status_code == 201
    # then one transaction: the key's database claim (ADR 0005, a SELECT of an advisory lock,
    # which carries the transaction's BEGIN; Django still logs a BEGIN of its own, which sends
    # nothing: tests/idempotency/test_record_commit.py reads the wire), stock (UPDATE ...
    # RETURNING), then the day's order number, the order, its line and its
    # transition in one statement (WITH ... INSERT, ordering/one_statement.py,
    # ordering/order_numbers.py), and the idempotency record (a call of its function,
    # migration 0008), whose statement carries the COMMIT (Django's own COMMIT then has
    # nothing to send: tests/idempotency/test_record_commit.py reads the wire); nothing is
    # read back.
    # The lock's query also reads the key's record under the claim (its second statement,
    # idempotency/stores/database_claim.py): a result Redis lost replays instead of running
    # the view again. Database-only mode sends the same statements (it makes no look-up
    # before the transaction), and its lock's query establishes the savepoint the view runs
    # in (its third; a refusal is recorded while the claim is still held), never released.
    # (The session's state is read again when the process's cache no longer trusts it, e.g.
    # more than 1 s later while the credential feed is not heard: authentication, not placing.)
    placing = [q for q in queries.captured_queries if "tenants_dinersession" not in q["sql"]]
    statements = [q["sql"].split()[0] for q in placing]
    expected = ["BEGIN", "BEGIN;", "UPDATE", "WITH", "SELECT", "COMMIT"]
    assert statements == expected, " ".join(statements)
    claim = placing[statements.index("BEGIN;")]["sql"]
    assert claim.startswith("BEGIN; SELECT pg_try_advisory_xact_lock")
    assert "idempotency_idempotencyrecord" in claim
    assert ('; SAVEPOINT "idempotency_view_' in claim) == (engine_mode == "database")
    record = placing[-2]["sql"]
    assert record.startswith("SELECT idempotency_insert_record(") and record.endswith("; COMMIT")
    # and the number the statement took is the one in the answer: the second of the day
    assert placed.json()["number"] == 2


@pytest.mark.django_db
def test_the_one_statement_writes_every_line_and_the_transition_with_their_ids(tenant, menu):
    # given an order of two dishes, placed with its rows written in one statement
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(menu["pasta"].pk, 1), ItemRequest(menu["pizza"].pk, 3)],
        payment_method="card",
        actor="api:abc/diner:d1",
    )
    # then the rows in hand carry the ids the database gave them, line by line
    stored = Order.objects.for_tenant(tenant).get(pk=order.pk)
    in_hand = {(line.pk, line.dish_id, line.quantity) for line in order.lines.all()}
    assert in_hand == {(line.pk, line.dish_id, line.quantity) for line in stored.lines.all()}
    assert len(in_hand) == 2
    [transition] = order.transitions.all()
    assert transition.pk == stored.transitions.get().pk
    # and they are saved rows: changing one updates it instead of inserting a copy
    line = order.lines.all()[0]
    line.dish_name = "Renamed"
    line.save(update_fields=["dish_name"])
    assert stored.lines.get(pk=line.pk).dish_name == "Renamed"
