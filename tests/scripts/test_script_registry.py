"""Versioned Lua scripts: upload checks, audiences of a canary, promote, roll back, hot reload."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.registry import registry, tenant_bucket
from idempotency.scripts.versions import (
    ScriptRejected,
    promote,
    record_contract_pass,
    rollback,
    shipped_source,
    start_canary,
    upload_version,
)

pytestmark = pytest.mark.django_db

# A new claim version: the shipped one plus a comment, so behaviour is unchanged.
CLAIM_V2 = "-- v2: same contract, reviewed\n" + shipped_source("claim")


def passed(script: LuaScriptVersion) -> LuaScriptVersion:
    record_contract_pass(script, author="ci")
    script.refresh_from_db()
    return script


def test_upload_compiles_hashes_and_audits():
    script = upload_version(name="claim", source=CLAIM_V2, author="alice")
    assert (script.version, script.state, script.author) == (1, "draft", "alice")
    assert len(script.sha256) == 64 and len(script.redis_sha1) == 40
    assert upload_version(name="claim", source=CLAIM_V2 + "\n", author="bob").version == 2
    assert list(LuaScriptChange.objects.values_list("action", "author")) == [
        ("upload", "bob"),
        ("upload", "alice"),
    ]


def test_a_broken_script_is_refused_with_the_redis_error():
    with pytest.raises(ScriptRejected, match=r"Redis refused the script: .*Error compiling"):
        upload_version(name="claim", source="return redis.call('GET', KEYS[1]", author="mallory")
    assert LuaScriptVersion.objects.count() == 0


def test_sha256_mismatch_and_unknown_names_are_refused():
    with pytest.raises(ScriptRejected, match="SHA-256 mismatch"):
        upload_version(name="claim", source=CLAIM_V2, author="a", expected_sha256="0" * 64)
    with pytest.raises(ScriptRejected, match="unknown script"):
        upload_version(name="evil", source="return 1", author="a")


def test_promotion_needs_the_contract_tests():
    script = upload_version(name="claim", source=CLAIM_V2, author="a")
    with pytest.raises(ScriptRejected, match="contract tests"):
        promote(script, author="a")
    with pytest.raises(ScriptRejected, match="contract tests"):
        start_canary(script, author="a", percent=5)


def test_a_five_percent_canary_reaches_about_five_percent_of_2000_tenants():
    script = passed(upload_version(name="claim", source=CLAIM_V2, author="a"))
    start_canary(script, author="a", percent=5)
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
    script = passed(upload_version(name="claim", source=CLAIM_V2, author="a"))
    start_canary(script, author="a", percent=0, tenants=["7"], regions=["eu-north"])
    registry.reload()
    assert registry.choose("claim", tenant_key="7").version == script.version
    assert registry.choose("claim", tenant_key="8", region="eu-north").version == script.version
    assert registry.choose("claim", tenant_key="8", region="eu-south").version == 0
    assert registry.choose("claim", tenant_key="8", pinned=script.version).version == script.version
    assert registry.choose("claim", tenant_key="8", pinned=99).version == 0


def test_promote_then_roll_back_step_by_step():
    v1 = passed(upload_version(name="claim", source=CLAIM_V2, author="a"))
    v2 = passed(upload_version(name="claim", source=CLAIM_V2 + "-- v3\n", author="a"))
    promote(v1, author="a")
    promote(v2, author="b")
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == v2.version
    assert rollback(name="claim", author="c").version == v1.version
    registry.reload()
    assert registry.choose("claim", tenant_key="1").version == v1.version
    assert rollback(name="claim", author="c") is None
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
    stable = passed(upload_version(name="claim", source=CLAIM_V2, author="a"))
    promote(stable, author="a")
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
        rollback(name="claim", author="staff")
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
    script = upload_version(name="finish", source=shipped_source("finish"), author="a")
    before = timezone.now()
    record_contract_pass(script, author="ci")
    script.refresh_from_db()
    assert script.contract_passed_at >= before
    assert json.dumps(LuaScriptChange.objects.first().detail) == "{}"
