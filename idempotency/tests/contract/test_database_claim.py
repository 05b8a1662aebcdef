"""The database claim (ADR 0005): without a Redis claim, duplicates never run the view.

Counted by the engine's ``VIEW_EXECUTED_HOOK`` (``testapp/executions.py``), not by rows: the
record's unique index alone already keeps one row, but only the claim keeps one *execution*.
The requests are real HTTP requests to the live server, a thread and a database connection
each, released together by a barrier while the first execution is still running.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from idempotency.core import engine
from idempotency.core.keys import ScopedKey
from idempotency.core.outcomes import StoredResponse
from idempotency.management.sandbox import ephemeral_redis
from idempotency.models import DuplicateAudit
from idempotency.stores import database as db_store
from idempotency.stores import database_claim, nodes
from idempotency.stores.audit_stream import drain_audits
from idempotency.tests.contract.test_storm import Answer, assert_one_execution, storm
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import behaviour

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def note_headers(tenant: str, key: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "X-Tenant": tenant,
        "X-Principal": "alice",
    }


def post_storm(url: str, path: str, tenant: str, key: str, *, requests: int = 24) -> list[Answer]:
    body = json.dumps({"text": key}).encode()
    return storm(url, path, body=body, headers=note_headers(tenant, key), requests=requests)


def wait_until(condition: Callable[[], bool], *, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def connect(*, autocommit: bool = True) -> psycopg.Connection:
    """A session of its own on the test database, beside Django's."""
    settings_dict = connection.settings_dict
    return psycopg.connect(
        host=settings_dict["HOST"],
        port=settings_dict["PORT"] or 5432,
        user=settings_dict["USER"],
        password=settings_dict["PASSWORD"],
        dbname=settings_dict["NAME"],
        autocommit=autocommit,
    )


def claim_waiters() -> int:
    """Sessions of this database waiting for an advisory lock: duplicates queued behind a
    database claim."""
    with connect() as conn:
        [(count,)] = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    return count


@pytest.fixture
def database_only(settings) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": None}
    nodes.reset()


@pytest.mark.parametrize(
    ("path", "duplicates_answer"),
    [("/notes/wait/", {"HIT"}), ("/notes/", {"IN_PROGRESS"})],
    ids=["wait", "reject"],
)
def test_a_database_only_storm_runs_the_view_once(
    database_only, live_server, tenant, path, duplicates_answer
):
    # given no Redis at all, and a view that takes a while
    behaviour["delay_seconds"] = 1.0
    # when 24 identical requests arrive together
    answers = post_storm(live_server.url, path, tenant, "db-storm")
    # then the view body ran once: under "wait" every duplicate replayed it, under "reject"
    # every duplicate was told to retry (409 + Retry-After, the same answer as in Redis mode)
    first = assert_one_execution(answers)
    assert first.status == 201
    assert executions.runs(tenant, "db-storm") == 1
    seen = set(Counter(a.result for a in answers if a is not first))
    # a duplicate that reached the server only after the first committed (a busy machine)
    # replays it under either policy
    assert duplicates_answer <= seen <= duplicates_answer | {"HIT"}
    assert Note.objects.count() == 1


@pytest.mark.parametrize("look_up", [False, True], ids=["claim reads", "look-up first"])
def test_a_run_committed_just_before_the_claim_is_found_under_it(
    database_only, live_server, tenant, monkeypatch, look_up
):
    """Without Redis the claim's query reads the key's record under the claim: on PostgreSQL
    there is no look-up before the transaction. Where there is one (statements cannot ride
    along, or inside a caller's transaction; forced here), a duplicate can commit and let the
    claim go between the look-up and the claim: the claim is then free, and only the read
    under it keeps the view from running a second time."""
    # given a run of the key that committed
    [first] = post_storm(live_server.url, "/notes/wait/", tenant, "gap", requests=1)
    assert first.result == "MISS" and executions.runs(tenant, "gap") == 1
    # when a duplicate arrives (with the look-up: it misses the run, which committed after it)
    if look_up:
        monkeypatch.setattr(engine, "reads_under_claim_and_closes", lambda: False)
    real = db_store.committed_result
    lookups: list[object] = []

    def committed_after_the_first_look(scoped: ScopedKey) -> object:
        lookups.append(scoped)
        return None if len(lookups) == 1 else real(scoped)

    monkeypatch.setattr(db_store, "committed_result", committed_after_the_first_look)
    nodes.local_cache().clear()  # the live server runs in this process: no answer from memory
    [again] = post_storm(live_server.url, "/notes/wait/", tenant, "gap", requests=1)
    # then the claim's own read (claim_and_read, not a second look-up) finds the run:
    # replayed, the view not run again, the replay audited
    assert len(lookups) == (1 if look_up else 0)
    assert (again.result, again.body) == ("HIT", first.body)
    assert executions.runs(tenant, "gap") == 1
    drain_audits()
    assert DuplicateAudit.objects.filter(outcome="HIT", source="database").count() == 1


def test_a_replay_is_answered_while_another_holds_the_claim(database_only, live_server, tenant):
    """A replay answers in its claim's transaction, so replays of one key meet at the claim.
    A finished key's record is final: read in the claim's query, it is the answer even when
    the claim is not free, under ``reject`` too (not a 409 to retry)."""
    # given a finished run, and another session holding the key's claim (as a replay does)
    [first] = post_storm(live_server.url, "/notes/", tenant, "held", requests=1)
    assert first.status == 201
    lock = database_claim.lock_id(
        ScopedKey(tenant=tenant, principal="alice", method="POST", route="notes/", key="held")
    )
    nodes.local_cache().clear()
    holder = connect(autocommit=False)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
        # when a duplicate arrives under "reject"
        [again] = post_storm(live_server.url, "/notes/", tenant, "held", requests=1)
    finally:
        holder.close()
    # then it replays the run at once
    assert (again.status, again.result, again.body) == (201, "HIT", first.body)
    assert executions.runs(tenant, "held") == 1


def test_a_replay_whose_audit_the_database_refuses_still_replays_and_keeps_it(
    database_only, live_server, tenant
):
    """The audit of a replay found under the claim is written in the claim's transaction. If
    the database refuses it, that transaction (it held only the claim) is rolled back, the
    replay still answers, and the audit waits in the process's batch until it can be written."""
    [first] = post_storm(live_server.url, "/notes/", tenant, "refused-audit", requests=1)
    table = DuplicateAudit._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION refuse_audits() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'audits refused'; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER refuse_audits BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION refuse_audits()"
        )
    try:
        # given a database that refuses audit rows, when a duplicate arrives
        nodes.local_cache().clear()
        [again] = post_storm(live_server.url, "/notes/", tenant, "refused-audit", requests=1)
        # then it replays the run, and its audit is not in the database yet
        assert (again.status, again.result, again.body) == (201, "HIT", first.body)
        assert not DuplicateAudit.objects.exists()
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER refuse_audits ON {table}")
            cursor.execute("DROP FUNCTION refuse_audits()")
    # and once the database takes audits again the batch writes it; the claim was let go
    assert drain_audits() >= 1
    assert DuplicateAudit.objects.filter(outcome="HIT").count() == 1
    nodes.local_cache().clear()
    [third] = post_storm(live_server.url, "/notes/", tenant, "refused-audit", requests=1)
    assert (third.status, third.result) == (201, "HIT")
    assert executions.runs(tenant, "refused-audit") == 1


@pytest.mark.parametrize(("under_redis", "runs"), [(True, 1), (False, 2)], ids=["on", "off"])
def test_redis_dying_mid_run_sends_duplicates_to_wait_for_the_run(
    settings, live_server, tenant, under_redis, runs
):
    """A request that claimed in Redis runs its view; Redis dies; the duplicates fall back to
    the database. With ``DATABASE_CLAIM_UNDER_REDIS`` the run holds the database claim too,
    so they wait for it and replay (the default); turned off (no statement added to the Redis
    path) that one run is repeated once, and rolled back by the record's unique index."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "DATABASE_CLAIM_UNDER_REDIS": under_redis}
    behaviour["hold"] = [first_run, later_runs] = [threading.Event(), threading.Event()]
    firsts: list[Answer] = []
    with ephemeral_redis() as node:
        settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": node.url}
        nodes.reset()
        # given a request that claimed its key in Redis and is running its view
        runner = threading.Thread(
            target=lambda: firsts.extend(
                post_storm(live_server.url, "/notes/wait/", tenant, "dies", requests=1)
            )
        )
        runner.start()
        wait_until(lambda: executions.runs(tenant, "dies") == 1)
    # when Redis is gone and 24 duplicates arrive while that view still runs (it is held until
    # a duplicate waits for the database claim, or, without the claim, runs the view itself;
    # the first run is let go first, then the duplicate's)
    storm_thread = threading.Thread(
        target=lambda: duplicates.extend(
            post_storm(live_server.url, "/notes/wait/", tenant, "dies")
        )
    )
    duplicates: list[Answer] = []
    storm_thread.start()
    if under_redis:
        wait_until(lambda: claim_waiters() >= 1)
    else:
        wait_until(lambda: executions.runs(tenant, "dies") == 2)
    first_run.set()
    runner.join(60)
    later_runs.set()
    storm_thread.join(60)
    # then every duplicate replays the first run's answer
    [first] = firsts
    assert first.result == "MISS" and first.status == 201
    assert {(a.result, a.body) for a in duplicates} == {("HIT", first.body)}
    assert executions.runs(tenant, "dies") == runs
    assert Note.objects.count() == 1


def test_the_claim_waits_within_its_budget_then_gives_up(tenant):
    # given another session holding the key's claim in an open transaction
    scoped = ScopedKey(tenant=tenant, principal="alice", method="POST", route="notes/", key="k")
    holder = connect(autocommit=False)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [database_claim.lock_id(scoped)])
        # when a duplicate asks for it under "reject", and under "wait" with a short budget
        for wait_seconds in (0.0, 0.3):
            with pytest.raises(database_claim.ClaimBusy), transaction.atomic():
                database_claim.claim_key(scoped, wait_seconds=wait_seconds)
        # then it is refused both times; once the holder commits, a waiter gets the claim
        release = threading.Timer(0.3, holder.commit)
        release.start()
        with transaction.atomic():
            assert database_claim.claim_key(scoped, wait_seconds=10) is (
                database_claim.Claimed.WAITED
            )
            # and the view then runs with the connection's own lock_timeout, not the budget
            with connection.cursor() as cursor:
                cursor.execute("SHOW lock_timeout")
                assert cursor.fetchone() == ("0",)
        release.join()
    finally:
        holder.close()


def test_the_record_is_read_under_the_claim_in_the_claims_round_trip(tenant):
    """claim_and_read: the read is the claim's second statement, with a snapshot of its own
    taken once the claim is held, so it sees the record of the run it waited for."""
    scoped = ScopedKey(tenant=tenant, principal="alice", method="POST", route="notes/", key="r")
    stored = StoredResponse(status=201, headers=(("Location", "/notes/7/"),), body=b'{"id":7}')
    inserted = threading.Event()

    def run_holding_the_claim() -> None:
        try:
            with transaction.atomic():
                database_claim.claim_key(scoped, wait_seconds=0)
                db_store.insert_record(
                    scoped=scoped,
                    fingerprint="f" * 64,
                    fingerprint_version=1,
                    field_hashes={"text": "h"},
                    response=stored,
                    ttl_seconds=60,
                )
                inserted.set()
                wait_until(lambda: claim_waiters() > 0)  # commits once the duplicate waits
        finally:
            connection.close()

    # given a run that holds the key's claim and has inserted, not committed, its record
    holder = threading.Thread(target=run_holding_the_claim)
    holder.start()
    assert inserted.wait(60)
    # when a duplicate claims the key under "reject", then under "wait"
    with pytest.raises(database_claim.ClaimBusy), transaction.atomic():
        database_claim.claim_and_read(scoped, wait_seconds=0)
    with CaptureQueriesContext(connection) as sent, transaction.atomic():
        found = database_claim.claim_and_read(scoped, wait_seconds=30)
    holder.join()
    # then the waiter reads the record the holder committed while it waited
    assert found is not None and (found.response, found.field_hashes) == (stored, {"text": "h"})
    # and a claim that is free reads in the same round trip: one query, two statements
    with CaptureQueriesContext(connection) as free, transaction.atomic():
        assert database_claim.claim_and_read(scoped, wait_seconds=0) == found
    [query] = statements(free)
    assert "pg_try_advisory_xact_lock" in query and "idempotency_idempotencyrecord" in query
    assert len(statements(sent)) == 2  # the try, then the wait: each with its read


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The queries sent, without the transaction's own BEGIN and COMMIT."""
    return [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]


@pytest.mark.parametrize("claim", ["free", "waited"])
def test_a_refusal_after_writing_is_recorded_while_the_claim_is_held(
    database_only, live_server, tenant, monkeypatch, claim
):
    """Without Redis the view runs in a savepoint the claim's query establishes. A refusal
    raised after the view wrote rolls back to it: the writes and their commit callbacks go,
    the claim stays held while the refusal is recorded (else a waiting duplicate would run
    the view in that gap). A claim that had to wait establishes the savepoint again after the
    lock: rolling back to the one made before it would release the lock."""
    key = f"refused-{claim}"
    lock = database_claim.lock_id(
        ScopedKey(tenant=tenant, principal="alice", method="POST", route="notes/wait/", key=key)
    )
    behaviour["refuse_after_write"] = {key}
    free_while_recording: list[bool] = []
    real_record = engine._record

    def record_and_probe_the_claim(req: object, stored: StoredResponse, **kwargs: object) -> None:
        with connect() as other:
            [(got,)] = other.execute("SELECT pg_try_advisory_lock(%s)", [lock]).fetchall()
            if got:
                other.execute("SELECT pg_advisory_unlock(%s)", [lock])
        free_while_recording.append(got)
        real_record(req, stored, **kwargs)

    monkeypatch.setattr(engine, "_record", record_and_probe_the_claim)
    holder = connect(autocommit=False)
    try:
        # given (waited) another session holding the key's claim when the request arrives
        if claim == "waited":
            holder.execute("SELECT pg_advisory_xact_lock(%s)", [lock])
        answers: list[Answer] = []
        runner = threading.Thread(
            target=lambda: answers.extend(
                post_storm(live_server.url, "/notes/wait/", tenant, key, requests=1)
            )
        )
        runner.start()
        if claim == "waited":
            wait_until(lambda: claim_waiters() == 1)
            holder.rollback()  # it ends without a record: the request gets the claim
        runner.join(60)
    finally:
        holder.close()
    # when its view wrote a note, registered a commit callback, then refused
    [refused] = answers
    assert (refused.status, refused.result) == (409, "MISS")
    # then the refusal was recorded while no other session could take the claim
    assert free_while_recording == [False]
    # and the note and the callback went with the rollback to the savepoint; the refusal stayed
    assert Note.objects.count() == 0 and behaviour["committed"] == []
    [again] = post_storm(live_server.url, "/notes/wait/", tenant, key, requests=1)
    assert (again.status, again.result, again.body) == (409, "HIT", refused.body)
    assert executions.runs(tenant, key) == 1
