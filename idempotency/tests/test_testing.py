"""``idempotency.testing``: a host's own tests start from an engine that remembers nothing.

A test case's transaction rolls the database back after each test, not what the engine keeps
beside it under Redis (its claims, replies, tokens, rate counters; this process's cached
results)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from idempotency.audit import AuditEvent
from idempotency.models import IdempotencyRecord, OutcomeCount
from idempotency.stores.audit_pending import PendingAudits, pending
from idempotency.testing import reset_engine
from idempotency.tests.conftest import idem_keys, post_note
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db


def _a_first_execution(tenant: str) -> AuditEvent:
    return AuditEvent(
        tenant_key=tenant,
        endpoint="POST notes/",
        key="k",
        outcome="MISS",
        source="database",
        principal="alice",
    )


def test_a_later_test_s_same_key_runs_its_view_once_the_engine_is_reset(tenant):
    """Under Redis (database-only, no process keeps results of its own). (red: with nothing to
    call, a host's second test sending the first one's key was replayed the first test's
    answer, naming a note its database never had; the module did not exist)"""
    # given a first test that ran the view under key k-1, then had its database rolled back
    first = post_note(Client(), tenant, key="k-1")
    assert first["X-Idempotent-Result"] == "MISS"
    Note.objects.all().delete()
    IdempotencyRecord.objects.all().delete()
    # then, without a reset, the next test's request is answered from what the engine kept
    assert post_note(Client(), tenant, key="k-1")["X-Idempotent-Result"] == "HIT"
    # when the next test starts with a reset
    reset_engine()
    # then its request runs the view, and nothing of the engine's is left in Redis but it
    assert [k for k in idem_keys() if f"{{t:{tenant}}}".encode() in k] == []
    again = post_note(Client(), tenant, key="k-1")
    assert again["X-Idempotent-Result"] == "MISS"
    assert executions.runs(tenant, "k-1") == 2 and Note.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_events_queued_in_a_test_database_are_not_written_once_it_is_gone(tenant):
    """Django's test runner destroys its test database, then gives the connection the real
    database's name back, before the process exits: the first-execution counts the last test
    left queued in this process were then written into the real database by the exit's flush
    (seen: a host's ``manage.py test`` added its MISS counts to the development database's
    ``OutcomeCount``), or logged as "could not write idempotency audit events" with a
    traceback. Red: the flush below wrote into the database named after the test's."""
    pending.discard()
    pending.record(_a_first_execution(tenant))
    assert len(pending) == 1
    test_database = connection.settings_dict["NAME"]
    # given the test database destroyed and the real name given back, as the runner does
    # (a name no database has: a write there fails, where the real one would take it)
    connection.close()
    connection.settings_dict["NAME"] = f"{test_database}_real_and_gone"
    try:
        # when the queue is flushed (the writer's round, or the exit's)
        written = pending.flush()
    finally:
        connection.close()
        connection.settings_dict["NAME"] = test_database
    # then nothing was written anywhere, and nothing is left to write
    assert written == 0 and len(pending) == 0
    assert not OutcomeCount.objects.filter(tenant_key=tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_a_test_run_leaves_its_counts_to_drain_audits_not_to_a_writer_thread(settings, tenant):
    """A host's ``manage.py test`` (``AUDIT_IN_BACKGROUND`` left on, as the README's settings
    leave it) printed "could not write idempotency audit events" with a traceback, ``database
    "test_..." does not exist``, after its last test, now and then: the writer thread woke to
    write that test's first-execution counts while the runner was dropping the test database,
    before it named the real one again, and so connected to a database being dropped. In a
    test run no writer thread starts: the counts wait for ``drain_audits()`` (a test that reads
    them calls it), ``reset_engine()`` drops them, and what is left at exit is dropped with the
    test database. Red: the writer thread started."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "AUDIT_IN_BACKGROUND": True}
    queue = PendingAudits()
    # when a first execution is counted during a test, with background writing on
    queue.record(_a_first_execution(tenant))
    # then no thread of this process will write it, and it is still queued
    assert not queue.runs_in_this_process
    assert len(queue) == 1
    # and a test that wants the counts writes them itself, into its own database
    assert queue.flush() == 1
    assert OutcomeCount.objects.filter(tenant_key=tenant).exists()
