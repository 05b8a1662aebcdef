"""Database-only mode by configuration: no Redis at all, the same contract."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection
from django.test import Client

from idempotency.tests.conftest import idem_keys, post_note
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import behaviour

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "no_redis", [{"REDIS_URL": None}, {"REDIS_CLIENT_FOR_TENANT": None}], ids=["url", "hook"]
)
def test_without_redis_the_database_alone_keeps_the_contract(settings, tenant, no_redis):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, **no_redis}
    first = post_note(Client(), tenant, key="db-only")
    again = post_note(Client(), tenant, key="db-only")
    reused = post_note(Client(), tenant, key="db-only", text="other")
    assert first["X-Idempotent-Result"] == "MISS"
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert reused.status_code == 422
    assert Note.objects.count() == 1
    assert idem_keys() == []  # nothing went to the Redis server the suite could have used


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("engine_mode", "status", "code"),
    [
        ("redis", 422, "IDEMPOTENCY_KEY_REUSED"),
        ("database", 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
    ],
    indirect=["engine_mode"],
)
def test_another_payload_while_the_first_runs_is_answered_by_mode(
    engine_mode, tenant, status, code
):
    """The README's one difference between the modes: the same key with another payload while
    the first request still runs. Redis's claim holds the first's fingerprint and answers 422;
    the database claim is a lock that holds no fingerprint, so the duplicate is told 409 (and,
    retried once the first has finished, 422). Either way the view runs once."""
    behaviour["hold"] = [first_runs := threading.Event()]
    answers: list = []

    def first() -> None:
        try:
            answers.append(post_note(Client(), tenant, key="k-run", text="first"))
        finally:
            connection.close()  # this thread's own session

    runner = threading.Thread(target=first)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while executions.runs(tenant, "k-run") == 0:
            assert time.monotonic() < deadline, "the first request never ran"
            time.sleep(0.01)
        other = post_note(Client(), tenant, key="k-run", text="other")
    finally:
        first_runs.set()
        runner.join(30)
    assert (other.status_code, json.loads(other.content)["code"]) == (status, code)
    assert answers[0].status_code == 201
    after = post_note(Client(), tenant, key="k-run", text="other")
    assert json.loads(after.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert executions.runs(tenant, "k-run") == 1 and Note.objects.count() == 1
