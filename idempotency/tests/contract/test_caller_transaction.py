"""A view run inside a transaction of the host's (``ATOMIC_REQUESTS``): the engine's own
transaction is a savepoint in it, and the request's writes and record commit only with it.

A commit that fails after the view returned (Django creates foreign keys ``DEFERRABLE
INITIALLY DEFERRED`` on PostgreSQL: a row referencing one another request deleted fails at
the commit) rolls back the writes and the record; the retry must not be told the operation
succeeded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

from idempotency.tests.conftest import post_note
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a deferred constraint trigger"),
]

FAILS_AT_COMMIT = "fails-at-commit"
NOTES = Note._meta.db_table


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    """Django wraps each view in a transaction of its own (read per request)."""
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    try:
        yield
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = False


@pytest.fixture
def deferred_check() -> Iterator[None]:
    """A constraint checked at commit, as a deferred foreign key is: a note with the text
    ``fails-at-commit`` fails its transaction's commit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION idem_test_fails_at_commit() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23503'; END $$;"
            f" CREATE CONSTRAINT TRIGGER idem_test_fails_at_commit AFTER INSERT ON {NOTES}"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
            f" WHEN (NEW.text = '{FAILS_AT_COMMIT}') EXECUTE FUNCTION idem_test_fails_at_commit()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"DROP TRIGGER idem_test_fails_at_commit ON {NOTES};"
                " DROP FUNCTION idem_test_fails_at_commit()"
            )


@pytest.mark.usefixtures("atomic_requests", "deferred_check")
def test_a_commit_that_fails_after_the_view_is_never_replayed_as_a_success(engine_mode, tenant):
    client = Client(raise_request_exception=False)
    # given a create whose request transaction fails at its commit, after the view answered 201
    first = post_note(client, tenant, key="deferred", text=FAILS_AT_COMMIT)
    assert first.status_code == 500
    assert not Note.objects.exists()
    # when the client retries with the same key
    again = post_note(client, tenant, key="deferred", text=FAILS_AT_COMMIT)
    # then it is not replayed the 201 of a note that was never written: under Redis the key
    # is in progress until its lease ends (as after a crash before commit), without Redis
    # the view runs again (and fails again at its commit)
    assert again.get("X-Idempotent-Result") != "HIT"
    if engine_mode == "redis":
        assert again.status_code == 409 and again["X-Idempotent-Result"] == "IN_PROGRESS"
        assert executions.runs(tenant, "deferred") == 1
    else:
        assert again.status_code == 500
        assert executions.runs(tenant, "deferred") == 2
    assert not Note.objects.exists()


@pytest.mark.usefixtures("atomic_requests")
def test_under_atomic_requests_a_retry_replays_the_committed_answer(engine_mode, tenant):
    # given a create run inside the request's transaction, committed with it
    first = post_note(Client(), tenant, key="atomic", text="once")
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    # when the client retries
    again = post_note(Client(), tenant, key="atomic", text="once")
    # then the first answer replays, byte for byte, and the view ran once
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert executions.runs(tenant, "atomic") == 1 and Note.objects.count() == 1
