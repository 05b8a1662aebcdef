"""Crash windows: a real process killed between commit and Redis finish, or before commit.

Redis and the database then disagree (the claim says "in progress" and its owner is dead);
the retry must replay the committed result (after commit) or, once the lease has run out,
execute exactly once (before commit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client

from idempotency.stores import nodes
from idempotency.tests.conftest import idem_keys, post_note, suite_redis
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_MS = 3000


def killed_client(where: str, tenant: str, key: str) -> None:
    """Run the crashing client against this test's database and check it really died."""
    db = connection.settings_dict
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    url = f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {**os.environ, "IDEMPOTENCY_TEST_DATABASE_URL": url}
    env.pop("IDEMPOTENCY_TEST_DATABASE_IS_THROWAWAY", None)
    env["DJANGO_SETTINGS_MODULE"] = os.environ.get(
        "DJANGO_SETTINGS_MODULE", "idempotency.tests.settings"
    )
    child = subprocess.run(
        [sys.executable, "-m", f"{__package__}.crashing_client", where, tenant, key, str(LEASE_MS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def claim_states() -> list[bytes | None]:
    client = suite_redis()
    return [client.hget(key, "st") for key in idem_keys(client)]


def test_killed_after_commit_the_retry_replays_the_committed_result(tenant):
    killed_client("after-commit", tenant, "crash-after")
    [note] = Note.objects.all()
    assert claim_states() == [b"p"]  # Redis still says "in progress"; its owner is dead
    # the retry, during the lease, replays what the dead process committed
    during = post_note(Client(), tenant, key="crash-after", text="crash")
    assert during.status_code == 201 and during["X-Idempotent-Result"] == "HIT"
    assert json.loads(during.content)["id"] == note.pk
    # and so does a retry on a process that has nothing cached, byte for byte
    nodes.reset()
    again = post_note(Client(), tenant, key="crash-after", text="crash")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == during.content
    assert Note.objects.count() == 1


def test_killed_before_commit_the_retry_executes_once_after_the_lease(tenant):
    killed_client("before-commit", tenant, "crash-before")
    assert Note.objects.count() == 0 and claim_states() == [b"p"]
    # within the lease the key is still held: retry later, nothing written
    early = post_note(Client(), tenant, key="crash-before", text="crash")
    assert early.status_code == 409
    assert json.loads(early.content)["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    # a second, not the lease left: the first request usually answers well within it
    assert early["Retry-After"] == "1" and Note.objects.count() == 0
    # once the dead process's lease has run out, the retry executes, once
    deadline = time.monotonic() + LEASE_MS / 1000 + 30
    while idem_keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    late = post_note(Client(), tenant, key="crash-before", text="crash")
    assert late.status_code == 201 and late["X-Idempotent-Result"] == "MISS"
    assert post_note(Client(), tenant, key="crash-before", text="crash").content == late.content
    assert Note.objects.count() == 1
