"""Versioned Lua scripts: upload checks, audiences of a canary, promote, roll back, hot reload."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.registry import registry, sha256_of, tenant_bucket
from idempotency.scripts.versions import (
    ScriptRejected,
    promote,
    record_contract_pass,
    rollback,
    shipped_source,
    start_canary,
    upload_version,
)
from tests.support.concurrency import waiting_on_me
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = pytest.mark.django_db

# A new claim version: the shipped one plus a comment, so behaviour is unchanged.
CLAIM_V2 = "-- v2: same contract, reviewed\n" + shipped_source("claim")
SHIPPED_CLAIM_SHA256 = sha256_of(shipped_source("claim"))


def passed(script: LuaScriptVersion) -> LuaScriptVersion:
    record_contract_pass(script, author="ci")
    script.refresh_from_db()
    return script


def test_upload_compiles_hashes_and_audits():
    script = upload_version(
        name="claim", source=CLAIM_V2, author="alice", reviewed_sha256=sha256_of(CLAIM_V2)
    )
    assert (script.version, script.state, script.author) == (1, "draft", "alice")
    assert len(script.sha256) == 64 and len(script.redis_sha1) == 40
    assert (
        upload_version(
            name="claim",
            source=CLAIM_V2 + "\n",
            author="bob",
            reviewed_sha256=sha256_of(CLAIM_V2 + "\n"),
        ).version
        == 2
    )
    assert list(LuaScriptChange.objects.values_list("action", "author")) == [
        ("upload", "bob"),
        ("upload", "alice"),
    ]


def test_a_broken_script_is_refused_with_the_redis_error():
    with pytest.raises(ScriptRejected, match=r"Redis refused the script: .*Error compiling"):
        upload_version(
            name="claim",
            source="return redis.call('GET', KEYS[1]",
            author="mallory",
            reviewed_sha256=sha256_of("return redis.call('GET', KEYS[1]"),
        )
    assert LuaScriptVersion.objects.count() == 0


def test_sha256_mismatch_and_unknown_names_are_refused():
    with pytest.raises(ScriptRejected, match="SHA-256 mismatch"):
        upload_version(name="claim", source=CLAIM_V2, author="a", reviewed_sha256="0" * 64)
    with pytest.raises(ScriptRejected, match="unknown script"):
        upload_version(
            name="evil", source="return 1", author="a", reviewed_sha256=sha256_of("return 1")
        )


def test_promotion_needs_the_contract_tests():
    script = upload_version(
        name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
    )
    with pytest.raises(ScriptRejected, match="contract tests"):
        promote(script, author="a", reviewed_sha256=script.sha256)
    with pytest.raises(ScriptRejected, match="contract tests"):
        start_canary(script, author="a", reviewed_sha256=script.sha256, percent=5)


def test_a_five_percent_canary_reaches_about_five_percent_of_2000_tenants():
    script = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    start_canary(script, author="a", reviewed_sha256=script.sha256, percent=5)
    registry.reload()
    chosen = [registry.choose("claim", tenant_key=str(t)).version for t in range(1, 2001)]
    share = chosen.count(script.version) / len(chosen)
    assert 0.035 < share < 0.065, share
    assert set(chosen) == {0, script.version}  # everyone else: the shipped script
    # the same tenants every time, in every process (a stable hash)
    assert all(
        (tenant_bucket(str(t)) < 5) == (chosen[t - 1] == script.version) for t in range(1, 2001)
    )


def test_allow_list_region_and_pinning():
    script = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    start_canary(
        script,
        author="a",
        reviewed_sha256=script.sha256,
        percent=0,
        tenants=["7"],
        regions=["eu-north"],
    )
    registry.reload()
    assert registry.choose("claim", tenant_key="7").version == script.version
    assert registry.choose("claim", tenant_key="8", region="eu-north").version == script.version
    assert registry.choose("claim", tenant_key="8", region="eu-south").version == 0
    assert registry.choose("claim", tenant_key="8", pinned=script.version).version == script.version
    assert registry.choose("claim", tenant_key="8", pinned=99).version == 0


def test_promote_then_roll_back_step_by_step():
    v1 = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    v2 = passed(
        upload_version(
            name="claim",
            source=CLAIM_V2 + "-- v3\n",
            author="a",
            reviewed_sha256=sha256_of(CLAIM_V2 + "-- v3\n"),
        )
    )
    promote(v1, author="a", reviewed_sha256=v1.sha256)
    promote(v2, author="b", reviewed_sha256=v2.sha256)
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == v2.version
    assert rollback(name="claim", author="c", reviewed_sha256=v1.sha256).version == v1.version
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == v1.version
    assert rollback(name="claim", author="c", reviewed_sha256=SHIPPED_CLAIM_SHA256) is None
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == 0  # the shipped script
    actions = list(LuaScriptChange.objects.order_by("id").values_list("action", flat=True))
    assert actions[-4:] == ["promote", "promote", "rollback", "rollback"]


WATCHER = """
import os, sys, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from idempotency.scripts.registry import registry
last = None
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    version = registry.choose("claim", tenant_key="1").version
    if version != last:
        print(f"{time.time():.3f} {version}", flush=True)
        last = version
    time.sleep(0.02)
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_rollback_reaches_two_running_processes_within_two_seconds(tmp_path: Path):
    # given a stable version and two running processes using it
    stable = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    promote(stable, author="a", reviewed_sha256=stable.sha256)
    env = {
        **__import__("os").environ,
        "APP_DB_NAME": settings.DATABASES["default"]["NAME"],
        "PYTHONPATH": str(Path(settings.BASE_DIR)),
    }
    watchers = [
        subprocess.Popen(
            [sys.executable, "-c", WATCHER], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for w in watchers:
            assert w.stdout.readline().split()[1] == str(stable.version)
        time.sleep(0.5)  # both listeners subscribed
        # when staff roll back
        rolled_back_at = time.time()
        rollback(name="claim", author="staff", reviewed_sha256=SHIPPED_CLAIM_SHA256)
        # then each process runs the shipped script within 2 s, without a restart
        for w in watchers:
            seen_at, version = w.stdout.readline().split()
            assert version == "0"
            assert float(seen_at) - rolled_back_at < 2.0
    finally:
        for w in watchers:
            w.kill()
            w.wait()


def test_contract_pass_is_recorded():
    script = upload_version(
        name="finish",
        source=shipped_source("finish"),
        author="a",
        reviewed_sha256=sha256_of(shipped_source("finish")),
    )
    before = timezone.now()
    record_contract_pass(script, author="ci")
    script.refresh_from_db()
    assert script.contract_passed_at >= before
    assert json.dumps(LuaScriptChange.objects.first().detail) == "{}"


@pytest.mark.parametrize("name", ["backfill", "issue_tokens", "ratelimit", "ratelimit_ceiling"])
def test_only_claim_finish_and_release_are_versioned(name):
    """docs/lua-scripts.md: the engine's other scripts run as shipped."""
    with pytest.raises(ScriptRejected, match=f"unknown script '{name}'"):
        upload_version(
            name=name,
            source=shipped_source("release"),
            author="a",
            reviewed_sha256=sha256_of(shipped_source("release")),
        )


def test_without_the_reviewed_sha256_nothing_changes():
    script = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    with pytest.raises(ScriptRejected, match="is required"):
        upload_version(name="claim", source=CLAIM_V2, author="a", reviewed_sha256="")
    with pytest.raises(ScriptRejected, match="SHA-256 mismatch"):
        start_canary(script, author="a", reviewed_sha256=sha256_of("other"), percent=100)
    with pytest.raises(ScriptRejected, match="SHA-256 mismatch"):
        promote(script, author="a", reviewed_sha256=SHIPPED_CLAIM_SHA256)
    promote(script, author="a", reviewed_sha256=script.sha256)
    with pytest.raises(ScriptRejected, match="SHA-256 mismatch"):
        rollback(name="claim", author="a", reviewed_sha256=script.sha256)  # not what runs next
    script.refresh_from_db()
    assert script.state == "stable" and script.canary_percent == 0


def test_a_row_changed_outside_the_workflow_is_refused_and_logged(caplog):
    script = passed(
        upload_version(
            name="claim", source=CLAIM_V2, author="a", reviewed_sha256=sha256_of(CLAIM_V2)
        )
    )
    promote(script, author="a", reviewed_sha256=script.sha256)
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == script.version
    # someone with database access swaps the source of the live version
    LuaScriptVersion.objects.filter(pk=script.pk).update(source="return {'MISS'}")

    with caplog.at_level("ERROR", logger="idempotency.scripts.registry"):
        registry.reload()

    assert registry.choose("claim", tenant_key="1").version == 0  # the shipped script runs
    assert "claim v1 refused" in caplog.text
    with pytest.raises(ScriptRejected, match="changed after its upload"):
        promote(script, author="a", reviewed_sha256=sha256_of("return {'MISS'}"))


def test_one_request_runs_every_script_from_the_version_set_it_started_with():
    from idempotency.core.conf import Policy
    from idempotency.core.engine import IdempotentRequest
    from idempotency.core.fingerprint import FINGERPRINT_VERSION
    from idempotency.core.keys import ScopedKey

    finish = passed(
        upload_version(
            name="finish",
            source="-- v2\n" + shipped_source("finish"),
            author="a",
            reviewed_sha256=sha256_of("-- v2\n" + shipped_source("finish")),
        )
    )
    registry.reload()
    request = IdempotentRequest(
        scoped=ScopedKey(tenant="1", principal="p", method="POST", route="r", key="k"),
        fingerprints={FINGERPRINT_VERSION: "f" * 64},
        policy=Policy(),
        endpoint="POST r",
    )
    assert request.script_source("claim") is None  # the claim ran the shipped set

    # the new finish becomes stable while the request runs
    promote(finish, author="a", reviewed_sha256=finish.sha256)
    registry.reload()

    assert request.script_source("finish") is None
    assert request.script_source("release") is None
    later = dataclasses.replace(request)  # the next request resolves afresh
    assert later.script_source("finish") == finish.source


def test_there_is_nothing_to_roll_back_on_the_shipped_script():
    with pytest.raises(ScriptRejected, match="nothing to roll back"):
        rollback(name="claim", author="a", reviewed_sha256=SHIPPED_CLAIM_SHA256)


@pytest.mark.django_db(transaction=True)
def test_two_staff_rolling_back_at_once_take_one_step_the_second_is_refused():
    """Two staff confirm "roll back" at the same instant, each having reviewed what the page
    said would run after it (v1). One rollback runs; the other, decided after it, finds the
    step already taken (v1 runs) and is refused by the reviewed hash, never a second step
    (red: both read v3 as stable, the second's update waited on the first's, then made v1
    stable beside v2: IntegrityError, a server error in the admin)."""
    v1, v2, v3 = (
        passed(
            upload_version(
                name="claim",
                source=CLAIM_V2 + f"-- {n}\n",
                author="a",
                reviewed_sha256=sha256_of(CLAIM_V2 + f"-- {n}\n"),
            )
        )
        for n in (1, 2, 3)
    )
    for version in (v1, v2, v3):
        promote(version, author="a", reviewed_sha256=version.sha256)
    first_done = threading.Event()
    second: list[BaseException | LuaScriptVersion | None] = []

    def roll_back_first() -> None:
        try:
            with transaction.atomic():
                rollback(name="claim", author="x", reviewed_sha256=v2.sha256)
                first_done.set()
                wait_until(waiting_on_me, what="the second rollback waiting")
        finally:
            connection.close()

    x = threading.Thread(target=roll_back_first)
    x.start()
    first_done.wait(DEADLINE_SECONDS)
    try:
        second.append(rollback(name="claim", author="y", reviewed_sha256=v2.sha256))
    except BaseException as exc:  # what the second caller got is the point
        second.append(exc)
    x.join(DEADLINE_SECONDS)

    [answer] = second
    assert isinstance(answer, ScriptRejected) and "SHA-256 mismatch" in str(answer)
    states = dict(LuaScriptVersion.objects.values_list("version", "state"))
    assert states == {v1.version: "retired", v2.version: "stable", v3.version: "retired"}
