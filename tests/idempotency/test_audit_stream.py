"""Audits on their durable paths: the Redis stream and its drain, the database when Redis is
away, the bounded in-process fallback, and the hourly outcome counters (real Redis, real
PostgreSQL)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import ProgrammingError, connection, transaction
from prometheus_client import REGISTRY

from idempotency.audit import AuditEvent, save_events
from idempotency.core.transactions import Opening
from idempotency.models import AuditStreamCursor, DuplicateAudit, OutcomeCount
from idempotency.stores import audit_stream, nodes
from idempotency.stores.audit_pending import pending
from idempotency.stores.audit_stream import drain, drain_audits, stream_key
from idempotency.tests.wire import queries_sent
from tests.flows.test_idempotent_orders import post_order
from tests.support.concurrency import waiting_on_me
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

AT = datetime(2030, 5, 17, 14, 25, tzinfo=UTC)


def suite_redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("idempotency_audits_dropped_total", {"reason": reason}) or 0


def counts(tenant_key: str) -> dict[str, int]:
    return {
        row.outcome: row.count
        for row in OutcomeCount.objects.filter(tenant_key=tenant_key).order_by("outcome")
    }


def event(n: int, outcome: str = "HIT", tenant_key: str = "901") -> AuditEvent:
    return AuditEvent(
        tenant_key=tenant_key,
        endpoint="POST api/v1/orders/",
        key=f"key-{n}",
        outcome=outcome,
        source="redis",
        principal="diner:d1",
        request_meta={"request_id": f"req-{n}"},
        differing_fields=["items", "note"] if outcome == "REUSED" else [],
        resource_ref="/api/v1/orders/7/",
        at=AT,
    )


class NoTrim:
    """The real client, except that XTRIM never happens: a drain that died right after its
    commit, before it trimmed the stream."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.connection_pool = client.connection_pool

    def xtrim(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_replay_is_in_the_stream_before_its_answer_and_the_drain_writes_it_once(
    api, menu, tenant
):
    first = post_order(api, menu, key="k-1")
    again = post_order(api, menu, key="k-1")
    assert again["X-Idempotent-Result"] == "HIT"
    client = suite_redis()
    [(_, fields)] = client.xrange(stream_key())  # the replay's audit, already out of the process
    assert fields[b"o"] == b"HIT" and fields[b"t"] == str(tenant.pk).encode()
    assert DuplicateAudit.objects.count() == 0

    assert drain_audits() == 2  # the first execution's count (batched) and the replay's entry
    [audit] = DuplicateAudit.objects.all()
    assert (audit.outcome, audit.resource_ref) == ("HIT", first["Location"])
    assert counts(str(tenant.pk)) == {"HIT": 1, "MISS": 1}
    assert client.xlen(stream_key()) == 0  # trimmed up to the cursor
    assert drain_audits() == 0 and DuplicateAudit.objects.count() == 1


def test_entries_read_again_after_a_drain_died_before_trimming_are_not_written_twice():
    client = suite_redis()
    for n in range(5):
        audit_stream.append(client, event(n))
    assert drain(NoTrim(client)) == 5
    assert client.xlen(stream_key()) == 5  # still there, as after a crash before XTRIM
    audit_stream.append(client, event(5, outcome="REUSED"))

    assert drain(client) == 1  # only the new entry
    assert DuplicateAudit.objects.count() == 6
    assert DuplicateAudit.objects.get(outcome="REUSED").differing_fields == ["items", "note"]
    assert counts("901") == {"HIT": 5, "REUSED": 1}
    assert client.xlen(stream_key()) == 0
    [cursor] = AuditStreamCursor.objects.all()
    assert cursor.last_id == client.xinfo_stream(stream_key())["last-generated-id"].decode()


def test_an_event_sent_more_than_once_is_one_row_and_one_count():
    client = suite_redis()
    resent, fallen_back = event(1), event(2)
    audit_stream.append(client, resent)
    audit_stream.append(client, resent)  # the same XADD again: its first reply was lost
    audit_stream.append(client, fallen_back)
    save_events([fallen_back])  # the append timed out, had landed, and was written at once too
    assert drain(client) == 3
    audit_stream.append(client, resent)  # once more, in a later drain's batch
    assert drain(client) == 1

    assert sorted(DuplicateAudit.objects.values_list("key", flat=True)) == ["key-1", "key-2"]
    assert counts("901") == {"HIT": 2}
    assert save_events([resent, event(3)]) == 1  # only the new one is written


def test_a_node_replaced_by_one_whose_clock_is_behind_still_has_its_audits_copied():
    """Stream ids are the node's clock. A node whose clock ran 2 minutes ahead left the cursor
    there; its replacement (a failover, a node swapped for an empty one) numbers its entries
    by its own, right clock, all below the cursor: none was ever copied, and once its ids
    passed the cursor the first drain to copy anything trimmed them away."""
    node = RedisNode().start()
    try:
        client = node.client()
        ahead_ms = int(time.time() * 1000) + 120_000
        for n in range(3):  # as the node with the clock ahead numbered them
            client.xadd(stream_key(), event(n).to_fields(), id=f"{ahead_ms}-{n}")
        assert drain(client) == 3
        node.stop()
        node.start()  # the same address, empty, its clock right
        client = node.client()
        for n in range(3, 8):
            audit_stream.append(client, event(n))

        assert drain(client) == 5

        assert DuplicateAudit.objects.count() == 8 and counts("901") == {"HIT": 8}
        assert client.xlen(stream_key()) == 0
    finally:
        node.remove()


def test_a_node_restored_from_an_older_snapshot_writes_no_audit_twice():
    """The snapshot's entries were copied (and trimmed) after it was taken: read again from
    the restored stream, they are the same events, written and counted once."""
    node = RedisNode().start()
    try:
        client = node.client()
        for n in range(3):
            audit_stream.append(client, event(n))
        client.save()  # the snapshot the node comes back with
        for n in range(3, 5):
            audit_stream.append(client, event(n))
        assert drain(client) == 5
        node.stop()
        node.start()  # loads the older snapshot: entries 0-2 again, the stream's ids behind
        client = node.client()
        assert client.xlen(stream_key()) == 3
        for n in range(5, 7):
            audit_stream.append(client, event(n))

        drain(client)

        assert DuplicateAudit.objects.count() == 7 and counts("901") == {"HIT": 7}
        assert client.xlen(stream_key()) == 0
    finally:
        node.remove()


@pytest.mark.django_db(transaction=True)
def test_two_drains_at_once_copy_each_entry_once():
    client = suite_redis()
    for n in range(400):
        audit_stream.append(client, event(n))
    start = threading.Barrier(2)
    copied: list[int] = []

    def drain_in_thread() -> None:
        start.wait()
        try:
            copied.append(drain(NoTrim(client)))  # no trims: both threads see every entry
        finally:
            connection.close()

    threads = [threading.Thread(target=drain_in_thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(copied) == 400
    assert DuplicateAudit.objects.count() == 400 and counts("901") == {"HIT": 400}


@pytest.mark.django_db(transaction=True)
def test_the_same_event_written_twice_at_once_is_one_row_and_one_count():
    """The second writer waits on the first's row (unique index), then skips it: no error,
    nothing written or counted by it (rows and counts in two statements, not a look-up)."""
    same = event(1)
    inserted = threading.Event()
    first_wrote: list[int] = []

    def first_writer() -> None:
        try:
            with transaction.atomic():
                first_wrote.append(save_events([same]))
                inserted.set()
                # not committed until the second writer waits on its row
                wait_until(waiting_on_me, what="the second writer waiting on the first's row")
        finally:
            connection.close()

    first = threading.Thread(target=first_writer)
    first.start()
    assert inserted.wait(60)
    second_wrote = save_events([same, event(2)])  # blocks on the row until the first commits
    first.join(60)
    assert (first_wrote, second_wrote) == ([1], 1)
    assert sorted(DuplicateAudit.objects.values_list("key", flat=True)) == ["key-1", "key-2"]
    assert counts("901") == {"HIT": 2}


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_rows_open_it_and_the_counts_commit_it():
    # when a duplicate's audit and a first execution's count are written with no transaction
    # open (a duplicate answered while Redis is away, a drain)
    with queries_sent() as sent:
        assert save_events([event(1), event(2, outcome="MISS")]) == 1
    # then two round trips: the row's statement carries the BEGIN, the counters' the COMMIT
    assert len(sent) == 2, sent
    assert sent[0].startswith('BEGIN; INSERT INTO "idempotency_duplicateaudit"')
    assert 'INSERT INTO "idempotency_outcomecount"' in sent[1] and sent[1].endswith("; COMMIT")
    assert counts("901") == {"HIT": 1, "MISS": 1}
    assert connection.get_autocommit() and connection.connection.autocommit
    # and inside a caller's transaction nothing rides along: its rollback undoes the writes
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        with queries_sent() as inside:
            assert save_events([event(3)]) == 1
        raise ZeroDivisionError
    assert not any("COMMIT" in q or q.startswith("BEGIN;") for q in inside), inside
    assert DuplicateAudit.objects.count() == 1 and counts("901") == {"HIT": 1, "MISS": 1}


@pytest.mark.django_db(transaction=True)
def test_a_count_that_fails_commits_no_row(monkeypatch):
    # given a counters' statement that fails (its table renamed on the way)
    real = Opening.execute

    def counters_fail(self, cursor, sql, params):
        sql = sql.replace('INSERT INTO "idempotency_outcomecount"', 'INSERT INTO "missing"', 1)
        return real(self, cursor, sql, params)

    monkeypatch.setattr(Opening, "execute", counters_fail)
    # when a duplicate's audit is written outside a transaction
    with pytest.raises(ProgrammingError):
        save_events([event(1)])
    # then the COMMIT that rode behind it never ran: no row, no count
    assert DuplicateAudit.objects.count() == 0 and counts("901") == {}


def test_database_only_a_replay_is_written_before_its_answer(api, menu, tenant, settings):
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
    }
    nodes.reset()
    post_order(api, menu, key="k-db")
    post_order(api, menu, key="k-db")
    [audit] = DuplicateAudit.objects.all()  # no drain: written at once
    assert audit.outcome == "HIT" and suite_redis().xlen(stream_key()) == 0
    assert counts(str(tenant.pk)) == {"HIT": 1}  # the first execution waits in the batch
    drain_audits()
    assert counts(str(tenant.pk)) == {"HIT": 1, "MISS": 1}


def test_a_full_fallback_queue_drops_and_counts_instead_of_growing(settings):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "AUDIT_QUEUE_MAX": 3}
    before = dropped("queue_full")
    taken = [pending.record(event(n, outcome="MISS")) for n in range(5)]
    assert taken == [True, True, True, False, False]
    assert dropped("queue_full") - before == 2
    assert len(pending) == 3


def test_events_the_database_keeps_refusing_are_dropped_after_the_attempts(settings):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "AUDIT_WRITE_ATTEMPTS": 3}
    before = dropped("write_failed")
    pending.record(event(1, tenant_key="t" * 100))  # longer than the column: refused
    for _ in range(3):
        with pytest.raises(Exception, match="too long"):
            pending.flush()
    assert len(pending) == 0
    assert dropped("write_failed") - before == 1
    assert pending.flush() == 0


def test_a_replay_redis_serves_is_audited_by_its_claim_once_with_its_resource(api, menu, tenant):
    """A retry that reaches another worker (the process's table empty): the claim that answers
    HIT appends the audit in its own round trip (claim_audit.lua), resource included."""
    first = post_order(api, menu, key="k-1")
    nodes.local_cache().clear()
    again = post_order(api, menu, key="k-1", HTTP_X_REQUEST_ID="replay-on-another-worker")
    assert again["X-Idempotent-Result"] == "HIT"
    [(_, fields)] = suite_redis().xrange(stream_key())
    assert (fields[b"o"], fields[b"s"]) == (b"HIT", b"redis")
    assert fields[b"r"] == first["Location"].encode()

    drain_audits()
    [audit] = DuplicateAudit.objects.all()
    assert (audit.outcome, audit.source, audit.resource_ref) == ("HIT", "redis", first["Location"])
    assert audit.request_meta["request_id"] == "replay-on-another-worker"
    assert counts(str(tenant.pk)) == {"HIT": 1, "MISS": 1}


def test_a_replay_of_an_entry_kept_without_its_location_is_audited_by_the_engine(api, menu, tenant):
    """An entry finished before finish.lua kept the Location ('loc'): the claim cannot name
    the resource, so it leaves the audit to the engine's own append."""
    first = post_order(api, menu, key="k-1")
    client = suite_redis()
    entries = client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")
    [key] = [k for k in entries if client.type(k) == b"hash" and client.hexists(k, "loc")]
    client.hdel(key, "loc")  # as an older finish left it
    nodes.local_cache().clear()

    again = post_order(api, menu, key="k-1")

    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    [(_, fields)] = client.xrange(stream_key())
    assert fields[b"r"] == first["Location"].encode()
    drain_audits()
    [audit] = DuplicateAudit.objects.all()
    assert (audit.outcome, audit.resource_ref) == ("HIT", first["Location"])
