"""The record's statement carries the engine transaction's COMMIT, and a live record it meets
fails it, so nothing the view wrote is committed (real PostgreSQL; the wire is read from
libpq's protocol trace). Outside a test transaction: inside one, the engine's transaction is a
savepoint and its commit is the caller's."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client

from idempotency.stores import nodes
from idempotency.tests.conftest import idem_keys, post_note, suite_redis
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import behaviour
from idempotency.tests.wire import queries_sent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own round trip"),
]


def test_a_record_redis_lost_fails_the_commit_and_the_committed_one_replays(tenant, settings):
    # given a note whose Redis entry is gone (evicted, a failover), on a process without it,
    # and no database claim under a Redis claim (which would read the record first)
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "DATABASE_CLAIM_UNDER_REDIS": False}
    first = post_note(Client(), tenant, key="evicted", text="once")
    suite_redis().delete(*idem_keys())
    nodes.reset()
    # when the client retries: Redis says MISS, so the view runs again
    with queries_sent() as sent:
        again = post_note(Client(), tenant, key="evicted", text="once")
    # then the record's statement, which carried the COMMIT, met the committed record: nothing
    # of the second run was committed, and the first answer replays
    assert executions.runs(tenant, "evicted") == 2
    assert [n.pk for n in Note.objects.all()] == [json.loads(first.content)["id"]]
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    [record] = [q for q in sent if q.endswith("; COMMIT")]
    assert record.startswith("SELECT idempotency_insert_record(") and "COMMIT" not in sent


@pytest.mark.parametrize("second_run", ["succeeds", "fails"])
def test_a_record_redis_lost_is_read_under_the_database_claim_and_the_view_not_run(
    tenant, second_run
):
    # given a note whose Redis entry is gone (Redis restarted without its data), on a process
    # without it
    first = post_note(Client(), tenant, key="flushed", text="once")
    suite_redis().delete(*idem_keys())
    nodes.reset()
    if second_run == "fails":  # a view that would fail now (its provider down)
        behaviour["fail_once"].add("once")
    # when the client retries: Redis says MISS
    with queries_sent() as sent:
        again = post_note(Client(), tenant, key="flushed", text="once")
    behaviour["fail_once"].clear()
    # then the record is read in the database claim's round trip, and the first answer replays
    # without the view running again (it answered a 500 when its second run failed)
    assert executions.runs(tenant, "flushed") == 1
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    [claim] = [q for q in sent if "pg_try_advisory_xact_lock" in q]
    assert "idempotency_idempotencyrecord" in claim
    assert [n.pk for n in Note.objects.all()] == [json.loads(first.content)["id"]]


def test_another_payload_after_redis_lost_the_key_leaves_the_operation_s_retries_replaying(
    tenant,
):
    # given a note whose Redis entry is gone (Redis restarted without its data)
    first = post_note(Client(), tenant, key="poison", text="once")
    suite_redis().delete(*idem_keys())
    nodes.reset()
    # when a request with another payload comes under the key: refused, as the key reused
    other = post_note(Client(), tenant, key="poison", text="other")
    assert other.status_code == 422
    assert json.loads(other.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    # then the operation's own retries still replay its answer (the Redis entry was finished
    # with the other payload's fingerprint: every retry was 422 for as long as Redis kept it)
    for _ in range(2):
        nodes.reset()
        again = post_note(Client(), tenant, key="poison", text="once")
        assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
        assert again.content == first.content
    assert executions.runs(tenant, "poison") == 1
