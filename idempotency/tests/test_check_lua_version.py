"""``check_lua_version``: the gate runs the contract suite in a sandbox, never on live data.

Each test here runs the real command, which runs the real contract suite in a subprocess
against an ephemeral redis-server and a throwaway database.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.versions import ScriptRejected, promote, shipped_source
from idempotency.stores.audit_stream import drain_audits
from idempotency.tests.conftest import post_note, suite_redis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MISS_RETURN = "  redis.call('PEXPIRE', key, lease_ms)\n  return {'MISS'}"
# the same contract as the shipped claim, plus a mark on the entries it creates
SOUND_CLAIM = shipped_source("claim").replace(
    MISS_RETURN, "  redis.call('HSET', key, 'sv', '2')\n" + MISS_RETURN
)
# compiles, but answers MISS to everyone: duplicates would run twice
ALWAYS_MISS = "return {'MISS'}"
# stores a truncated reply: replays from Redis would not be the first answer
TRUNCATING_FINISH = shipped_source("finish").replace(
    "'res', ARGV[2],", "'res', string.sub(ARGV[2], 1, 10),"
)


def version(name: str, source: str, **fields: Any) -> LuaScriptVersion:
    number = LuaScriptVersion.objects.filter(name=name).count() + 1
    return LuaScriptVersion.objects.create(
        name=name,
        version=number,
        source=source,
        sha256=hashlib.sha256(source.encode()).hexdigest(),
        redis_sha1=hashlib.sha1(source.encode()).hexdigest(),
        author="alice",
        **fields,
    )


def check(script: LuaScriptVersion, *options: str) -> str:
    out = StringIO()
    call_command("check_lua_version", script.name, str(script.version), *options, stdout=out)
    return out.getvalue()


# Keys that expire sooner than this may vanish on their own while the gate runs (an earlier
# test's rate-limit window, say); the rest must come out exactly as they went in.
LASTING_MS = 15 * 60 * 1000


def redis_snapshot() -> dict[bytes, tuple[bytes, int]]:
    """Every key of the configured Redis database with its serialised value and its TTL in ms
    (-1: none)."""
    client = suite_redis()
    return {key: (client.dump(key), client.pttl(key)) for key in client.scan_iter(count=1000)}


def assert_redis_untouched(before: dict[bytes, tuple[bytes, int]]) -> None:
    """No key added; every lasting key kept with its value and whether it expires."""
    after = redis_snapshot()
    assert set(after) - set(before) == set()
    lasting = {k: v for k, v in before.items() if v[1] == -1 or v[1] > LASTING_MS}
    assert {k: (after[k][0], after[k][1] == -1) for k in lasting if k in after} == {
        k: (v[0], v[1] == -1) for k, v in lasting.items()
    }


def database_snapshot() -> dict[str, list[dict]]:
    return {
        model._meta.label: list(model.objects.order_by("pk").values())
        for model in apps.get_models()
        if model._meta.app_label in ("idempotency", "idempotency_testapp")
    }


def databases_on_server() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database")
        return {row[0] for row in cursor.fetchall()}


def test_a_full_pass_is_recorded_and_nothing_else_touches_the_live_redis_or_database(
    settings, tenant
):
    # no rate-limit counters: their fixed windows would expire during the run
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "RATE_LIMIT_PER_MINUTE": None}
    # given live data: replies and a token-like key in Redis, records, notes and audits
    first = post_note(Client(), tenant, key="live-1")
    post_note(Client(), tenant, key="live-1")  # a replay: one audit row
    drain_audits()
    client = suite_redis()
    client.set("idem:{t:live}:tok:abc", "p:alice", ex=24 * 3600)
    client.hset("app:session:42", mapping={"user": "7"})
    candidate = version("claim", SOUND_CLAIM)
    redis_before, database_before = redis_snapshot(), database_snapshot()
    assert first.status_code == 201 and len(redis_before) >= 3
    # when the gate runs the full contract suite against the candidate
    output = check(candidate)
    # then it passed and says where it ran
    assert f"{candidate} passed the contract tests" in output
    sandbox = re.search(r"redis-server 127\.0\.0\.1:(\d+) and database (idem_contract_\w+)", output)
    port, throwaway = int(sandbox.group(1)), sandbox.group(2)
    assert "claim v1 (candidate)" in output and "finish shipped" in output
    # and every Redis key is as it was, and no key was added
    assert_redis_untouched(redis_before)
    # and the only database change is the recorded pass (the row and its change log)
    after = database_snapshot()
    [row_after] = after.pop("idempotency.LuaScriptVersion")
    [row_before] = database_before.pop("idempotency.LuaScriptVersion")
    assert row_after.pop("contract_passed_at") is not None
    assert row_before.pop("contract_passed_at") is None and row_after == row_before
    changes = after.pop("idempotency.LuaScriptChange")
    assert database_before.pop("idempotency.LuaScriptChange") == []
    assert [(c["script_id"], c["action"]) for c in changes] == [(candidate.pk, "contract_passed")]
    assert after == database_before
    # and the sandbox is gone: its database dropped, its redis-server stopped
    assert throwaway not in databases_on_server()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_broken_candidate_fails_and_nothing_is_recorded():
    broken = version("claim", ALWAYS_MISS)
    with pytest.raises(CommandError, match="fails the contract tests"):
        check(broken, "--quick")
    broken.refresh_from_db()
    assert broken.contract_passed_at is None
    assert not LuaScriptChange.objects.exists()


def test_a_quick_pass_is_not_recorded_and_cannot_gate_a_promotion():
    candidate = version("claim", SOUND_CLAIM)
    output = check(candidate, "--quick")
    assert "not recorded" in output
    candidate.refresh_from_db()
    assert candidate.contract_passed_at is None
    with pytest.raises(ScriptRejected, match="has not passed the contract tests"):
        promote(candidate, author="alice", reviewed_sha256=candidate.sha256)


def test_the_candidate_runs_beside_the_live_versions_of_the_other_scripts():
    assert shipped_source("finish") != TRUNCATING_FINISH
    # given a live (stable) finish that truncates what it stores
    version("finish", TRUNCATING_FINISH, state=LuaScriptVersion.State.STABLE)
    candidate = version("claim", SOUND_CLAIM)
    # then a sound claim fails beside it: the run used the live finish, not the shipped one
    with pytest.raises(CommandError, match="fails the contract tests"):
        check(candidate, "--quick")


def test_it_refuses_without_a_redis_server_binary():
    candidate = version("claim", SOUND_CLAIM)
    with pytest.raises(CommandError, match=r"refusing .* no /nowhere/redis-server binary"):
        check(candidate, "--quick", "--redis-server", "/nowhere/redis-server")
    candidate.refresh_from_db()
    assert candidate.contract_passed_at is None


@pytest.fixture
def role_without_createdb() -> Any:
    """A PostgreSQL role that may read this database but not create one."""
    role = f"idem_gate_no_createdb_{uuid.uuid4().hex[:8]}"  # roles are server-wide
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN NOCREATEDB NOSUPERUSER")
        cursor.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    yield role
    with connection.cursor() as cursor:
        cursor.execute(f"DROP OWNED BY {role}")
        cursor.execute(f"DROP ROLE {role}")


def test_it_refuses_where_it_may_not_create_a_database(role_without_createdb, tmp_path: Path):
    candidate = version("claim", SOUND_CLAIM)
    db = connection.settings_dict
    url = f"postgres://{role_without_createdb}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(IDEMPOTENCY_TEST_DATABASE_URL=url)
    env.pop("IDEMPOTENCY_TEST_DATABASE_IS_THROWAWAY", None)
    run = subprocess.run(
        [
            *(sys.executable, "-m", "django", "check_lua_version", "claim", str(candidate.version)),
            *("--quick", "--settings", "idempotency.tests.settings"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "refusing to run the contract suite: cannot create a throwaway database" in run.stderr
    assert "permission denied to create database" in run.stderr
    candidate.refresh_from_db()
    assert candidate.contract_passed_at is None
