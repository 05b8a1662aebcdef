"""SQLite (the embedded case), database-only, ``transaction_mode: IMMEDIATE``: the database
claim is the writer lock ``BEGIN IMMEDIATE`` takes. A request that cannot take it within the
database's ``timeout`` (a storm, a view longer than the timeout) ran nothing, and gets the
engine's busy answer, 409 ``IDEMPOTENCY_REQUEST_IN_PROGRESS`` with ``Retry-After``, not a 500
``database is locked``. Run in a process of its own: the suite's database is PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sqlite3, sys
from django.conf import settings
from idempotency.tests import settings as suite

path = sys.argv[1]
values = {name: getattr(suite, name) for name in dir(suite) if name.isupper()}
values["DATABASES"] = {"default": {
    "ENGINE": "django.db.backends.sqlite3", "NAME": path,
    "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 0.2},
}}
values["IDEMPOTENCY"] = {**suite.IDEMPOTENCY, "REDIS_URL": None}
settings.configure(**values)
import django
django.setup()
from django.core.management import call_command
from django.test import Client
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note

call_command("migrate", verbosity=0)
holder = sqlite3.connect(path)  # another writer, holding the lock past the timeout
holder.execute("BEGIN IMMEDIATE")
caller = {"HTTP_X_TENANT": "t", "HTTP_X_PRINCIPAL": "alice", "HTTP_IDEMPOTENCY_KEY": "k-1"}
def post():
    return Client().post("/notes/", {"text": "soup"}, content_type="application/json", **caller)
busy = post()
holder.rollback()
after = post()
print(json.dumps({
    "busy": [busy.status_code, busy.get("Retry-After"), json.loads(busy.content).get("code")],
    "after": [after.status_code, after["X-Idempotent-Result"]],
    "notes": Note.objects.count(),
    "runs": executions.runs("t", "k-1"),
}))
"""


def test_a_claim_that_cannot_take_sqlites_writer_lock_is_told_to_retry(tmp_path: Path) -> None:
    """Red before: the request answered 500 ``database is locked``."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": ""}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "db.sqlite3")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # the busy request ran nothing and is told to retry; its retry, once the lock is free, runs
    assert seen["busy"] == [409, "1", "IDEMPOTENCY_REQUEST_IN_PROGRESS"]
    assert seen["after"] == [201, "MISS"]
    assert seen["notes"] == 1 and seen["runs"] == 1
