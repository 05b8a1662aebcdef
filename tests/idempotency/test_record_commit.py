"""The idempotency record's statement carries its transaction's COMMIT, and the database
claim its BEGIN (a round trip less each per first execution), and neither commits anything it
should not (real PostgreSQL; the wire is
read from libpq's protocol trace, ``idempotency/tests/wire.py``). A record Redis lost failing
that statement is the engine's contract test ``idempotency/tests/contract/test_record_commit.py``
(an order meets its own unique key first, in the view).

These tests run without the test transaction around them (``transaction=True``): inside one,
the engine's transaction is a savepoint and its commit is the caller's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from idempotency.core.keys import ScopedKey
from idempotency.core.outcomes import StoredResponse
from idempotency.models import IdempotencyRecord
from idempotency.stores import database as db_store
from idempotency.tests.wire import queries_sent
from ordering.api import views
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
    # a call of the record's function (the server keeps its plan), told to refuse a live record
    assert record.startswith("SELECT idempotency_insert_record(")
    assert record.endswith(", true); COMMIT")
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


def test_the_claim_opens_the_transaction_in_the_same_round_trip(api, menu, engine_mode):
    # given a warm connection
    assert post_order(api, menu, key="warm-up").status_code == 201
    # when an order is placed
    with queries_sent() as sent:
        placed = post_order(api, menu, key="k")
    assert placed.status_code == 201 and placed["X-Idempotent-Result"] == "MISS"
    # then no BEGIN goes on its own: the first statement of the transaction, the database
    # claim, carries it; everything up to the record's COMMIT runs in that transaction
    assert "BEGIN" not in sent
    [opening] = [i for i, q in enumerate(sent) if q.startswith("BEGIN;")]
    assert sent[opening].startswith("BEGIN; SELECT pg_try_advisory_xact_lock(")
    assert sent[-1].endswith("; COMMIT") and opening < len(sent) - 1
    assert IdempotencyRecord.objects.count() == Order.all_tenants.count() == 2
    # and the connection is left as Django expects between transactions: the next atomic
    # block gets psycopg's own BEGIN, and its rollback undoes its write
    assert connection.get_autocommit() and connection.connection.autocommit
    with queries_sent() as after, pytest.raises(ZeroDivisionError), transaction.atomic():
        Order.all_tenants.update(note="changed")
        raise ZeroDivisionError
    assert after[0] == "BEGIN" and after[-1] == "ROLLBACK"
    assert not Order.all_tenants.filter(note="changed").exists()


def test_a_view_that_fails_after_the_opening_claim_leaves_nothing(
    api, menu, engine_mode, monkeypatch
):
    # given a warm connection, and a view that fails after the order's statements ran
    assert post_order(api, menu, key="warm-up").status_code == 201
    real = views.place_order

    def crashes_after_writing(**kwargs):
        real(**kwargs)
        raise RuntimeError("the process failed after writing")

    monkeypatch.setattr(views, "place_order", crashes_after_writing)
    api.raise_request_exception = False  # a crash is an answer (500) here
    with queries_sent() as sent:
        failed = post_order(api, menu, key="k")
    # then the transaction the claim opened is rolled back: no second order, no second record
    assert failed.status_code == 500
    assert any(q.startswith("BEGIN; SELECT pg_try_advisory_xact_lock(") for q in sent)
    assert sent[-1] == "ROLLBACK"
    assert IdempotencyRecord.objects.count() == Order.all_tenants.count() == 1


@pytest.mark.parametrize("expired", [True, False], ids=["expired", "live"])
def test_the_committing_record_replaces_an_expired_record_and_refuses_a_live_one(expired):
    # given a committed record of the key, expired or live
    scoped = ScopedKey(tenant="9", principal="p", method="POST", route="r", key="k")
    args = {"scoped": scoped, "fingerprint": "a" * 64, "fingerprint_version": 1, "field_hashes": {}}
    first = StoredResponse(status=201, body=b"first")
    assert db_store.insert_record(**args, response=first, ttl_seconds=60)
    if expired:
        IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    # when a transaction ends with the record's statement carrying its COMMIT
    second = StoredResponse(status=201, body=b"second")
    if expired:
        with transaction.atomic():
            assert db_store.insert_record(**args, response=second, ttl_seconds=60, commit=True)
    else:
        with pytest.raises(IntegrityError), transaction.atomic():
            db_store.insert_record(**args, response=second, ttl_seconds=60, commit=True)
    # then an expired record was replaced and committed, a live one kept
    kept = db_store.committed_result(scoped)
    assert kept is not None and kept.response.body == (b"second" if expired else b"first")
    assert IdempotencyRecord.objects.count() == 1
