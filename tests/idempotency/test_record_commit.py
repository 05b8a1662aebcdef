"""The idempotency record's statement carries its transaction's COMMIT (one round trip less
per first execution), and never commits anything it should not (real PostgreSQL; the wire is
read from libpq's protocol trace, ``idempotency/tests/wire.py``). A record Redis lost failing
that statement is the engine's contract test ``idempotency/tests/contract/test_record_commit.py``
(an order meets its own unique key first, in the view).

These tests run without the test transaction around them (``transaction=True``): inside one,
the engine's transaction is a savepoint and its commit is the caller's."""

from __future__ import annotations

import pytest
from django.db import transaction

from idempotency.models import IdempotencyRecord
from idempotency.tests.wire import queries_sent
from ordering.models import Order
from tests.flows.test_idempotent_orders import post_order

pytestmark = pytest.mark.django_db(transaction=True)


def fused(sent: list[str]) -> list[str]:
    return [q for q in sent if q.endswith("; COMMIT")]


def test_the_record_commits_its_transaction_in_the_same_round_trip(api, menu, engine_mode):
    assert post_order(api, menu, key="warm-up").status_code == 201
    with queries_sent() as sent:
        placed = post_order(api, menu, key="k")
    assert placed.status_code == 201 and placed["X-Idempotent-Result"] == "MISS"
    [record] = fused(sent)
    assert record.startswith("WITH inserted AS (INSERT INTO")
    assert "idempotency_idempotencyrecord" in record
    assert "COMMIT" not in sent  # nothing left to commit after it
    assert sent[-1] == record
    assert IdempotencyRecord.objects.count() == Order.all_tenants.count() == 2


def test_inside_a_callers_transaction_the_commit_is_left_to_the_caller(api, menu):
    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        with queries_sent() as sent:
            placed = post_order(api, menu, key="k")
        assert placed.status_code == 201 and Order.all_tenants.count() == 1
        raise Undo
    assert fused(sent) == [] and "COMMIT" not in sent
    assert Order.all_tenants.count() == 0 and IdempotencyRecord.objects.count() == 0
