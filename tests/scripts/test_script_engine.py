"""The engine runs the version the registry picks: canaries, pins, NOSCRIPT, contract checks."""

from __future__ import annotations

import threading
from io import StringIO

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command

from idempotency.scripts.registry import VERSIONED_SCRIPTS, registry, sha256_of
from idempotency.scripts.versions import (
    promote,
    record_contract_pass,
    rollback,
    shipped_source,
    start_canary,
    upload_version,
)
from idempotency.stores import nodes as stores
from ordering.models import Order
from tenants.api_keys import issue_api_key
from tests.conftest import api_for, menu_for, use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.support.auth import diner_token
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.django_db

MISS_RETURN = "  redis.call('PEXPIRE', key, lease_ms)\n  return {'MISS'}"
# claim v2: the same contract, and it leaves a mark on the entries it creates
MARKED_CLAIM = shipped_source("claim").replace(
    MISS_RETURN, "  redis.call('HSET', key, 'sv', '2')\n" + MISS_RETURN
)


SHIPPED_CLAIM_SHA256 = sha256_of(shipped_source("claim"))


def claim_v2():
    assert MISS_RETURN in shipped_source("claim")
    script = upload_version(
        name="claim", source=MARKED_CLAIM, author="alice", reviewed_sha256=sha256_of(MARKED_CLAIM)
    )
    record_contract_pass(script, author="ci")
    return script


def marks(tenant) -> list[bytes | None]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    return [client.hget(k, "sv") for k in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")]


def test_an_allow_listed_tenant_runs_the_canary_others_the_stable(make_tenant):
    canary_tenant, other = make_tenant(), make_tenant()
    script = claim_v2()
    start_canary(
        script, author="alice", reviewed_sha256=script.sha256, tenants=[str(canary_tenant.pk)]
    )
    registry.reload()
    for tenant in (canary_tenant, other):
        assert post_order(api_for(tenant, diner="d"), menu_for(tenant), key="k").status_code == 201
    assert marks(canary_tenant) == [b"2"]
    assert marks(other) == [None]


def test_x_lua_version_is_honoured_only_for_test_clients(tenant):
    script = claim_v2()
    promote(
        script, author="alice", reviewed_sha256=script.sha256
    )  # make the version known to the registry
    # stable is the shipped script again; v2 retired
    rollback(name="claim", author="alice", reviewed_sha256=SHIPPED_CLAIM_SHA256)
    registry.reload()
    menu = menu_for(tenant)
    normal = api_for(tenant, diner="d1")
    qa_backend, _ = issue_api_key(tenant=tenant, name="qa", kind="merchant", is_test=True)
    tester = api_for(tenant, diner="d2")  # a session signed in by the test key
    tester.credentials(HTTP_AUTHORIZATION=f"Bearer {diner_token(tenant, 'd2', client=qa_backend)}")
    post_order(normal, menu, key="plain", HTTP_X_LUA_VERSION=str(script.version))
    post_order(tester, menu, key="pinned", HTTP_X_LUA_VERSION=str(script.version))
    assert sorted(marks(tenant), key=str) == [None, b"2"]


@pytest.mark.parametrize(
    "pin",
    [
        pytest.param("\N{SUPERSCRIPT TWO}", id="a digit of another script"),
        pytest.param("1" * 5000, id="more digits than Python converts"),
    ],
)
def test_an_x_lua_version_that_is_no_version_number_is_ignored(tenant, pin):
    """``str.isdigit`` holds for "²" (a header's latin-1 byte 0xB2) and for 5,000 digits, and
    ``int()`` of either raises: a test client's order answered 500."""
    menu = menu_for(tenant)
    qa_backend, _ = issue_api_key(tenant=tenant, name="qa", kind="merchant", is_test=True)
    tester = api_for(tenant, diner="d2")
    tester.credentials(HTTP_AUTHORIZATION=f"Bearer {diner_token(tenant, 'd2', client=qa_backend)}")
    placed = post_order(tester, menu, key="pinned", HTTP_X_LUA_VERSION=pin)
    assert placed.status_code == 201, placed.content
    assert marks(tenant) == [None]  # the stable script ran


def test_noscript_after_script_flush_is_recovered(settings, tenant):
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        api, menu = api_for(tenant, diner="d1"), menu_for(tenant)
        script = claim_v2()
        promote(script, author="alice", reviewed_sha256=script.sha256)
        registry.reload()
        assert post_order(api, menu, key="before").status_code == 201
        node.client().script_flush()
        # the next calls find no script on the server: EVALSHA fails with NOSCRIPT, the
        # engine loads the script and retries, the client notices nothing
        again = post_order(api, menu, key="after")
        assert again.status_code == 201 and again["X-Idempotent-Result"] == "MISS"
        assert post_order(api, menu, key="after")["X-Idempotent-Result"] == "HIT"
        assert Order.objects.for_tenant(tenant).count() == 2
    finally:
        node.remove()


@pytest.mark.slow
def test_check_command_runs_from_the_product_and_refuses_a_broken_version():
    """The gate from the product's settings: the engine's contract suite in its sandbox. A
    quick pass is reported but not recorded (a promotion needs a full pass)."""
    sound = upload_version(
        name="claim", source=MARKED_CLAIM, author="alice", reviewed_sha256=sha256_of(MARKED_CLAIM)
    )
    out = StringIO()
    call_command("check_lua_version", "claim", str(sound.version), "--quick", stdout=out)
    assert "passed the quick contract run; not recorded" in out.getvalue()
    sound.refresh_from_db()
    assert sound.contract_passed_at is None
    # compiles, but answers MISS for everything: duplicates would run twice
    always_miss = "return {'MISS'}"
    broken = upload_version(
        name="claim", source=always_miss, author="mallory", reviewed_sha256=sha256_of(always_miss)
    )
    with pytest.raises(CommandError, match="fails the contract tests"):
        call_command(
            "check_lua_version", "claim", str(broken.version), "--quick", stdout=StringIO()
        )
    broken.refresh_from_db()
    assert broken.contract_passed_at is None


def test_the_versionable_scripts_are_exactly_the_ones_requests_run(
    api, menu, settings, monkeypatch
):
    """Only a script the engine calls may be versioned, and every script the store ships is
    called: a versionable script nothing runs (as ``backfill`` was) could be promoted with no
    effect, and a script the engine runs but cannot version could not be fixed live."""
    from redis.commands.core import Script

    from idempotency.stores.redis_store import _SCRIPTS, _script_source, _with_audit
    from ordering.api import views
    from tests.idempotency.test_tokens import issue, place

    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RATE_LIMIT_PER_MINUTE": None,
        "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": None,
    }
    registry.reload()  # the shipped versions (an earlier test's promotion was rolled back)
    names = {_script_source(name): name for name in _SCRIPTS}
    # off a Cluster a claim runs inside claim_audit.lua, which appends a replay's audit
    names |= {_with_audit(_script_source(name)): name for name in ("claim", "claim_token")}
    token = issue(api, 1).json()["tokens"][0]  # issuing is not the claim path
    ran: list[str] = []
    real_call = Script.__call__

    requests_thread = threading.get_ident()

    def recording(script, *args, **kwargs):
        # the requests' own calls: a background thread's (a lease or heartbeat renewed during
        # the test on a busy machine, seen as "other") are not theirs
        if threading.get_ident() == requests_thread:
            ran.append(names.get(script.script, "other"))
        return real_call(script, *args, **kwargs)

    monkeypatch.setattr(Script, "__call__", recording)
    # given every kind of request the engine answers: a first execution, a replay from Redis,
    # a 5xx (its key released), and a pre-issued token as the key
    assert post_order(api, menu, key="first")["X-Idempotent-Result"] == "MISS"
    stores.local_cache().clear()
    assert post_order(api, menu, key="first")["X-Idempotent-Result"] == "HIT"
    real_place = views.place_order

    def crashing(**kwargs):
        real_place(**kwargs)
        raise RuntimeError("the process dies after writing")

    monkeypatch.setattr(views, "place_order", crashing)
    api.raise_request_exception = False
    assert post_order(api, menu, key="crash").status_code == 500
    monkeypatch.setattr(views, "place_order", real_place)
    assert place(api, menu, token)["X-Idempotent-Result"] == "MISS"
    # then the store's scripts are exactly the ones these requests ran ...
    assert set(ran) == set(_SCRIPTS), ran
    # ... and the versionable ones are those, less the token prelude, which runs in front of
    # whichever claim version the request resolved
    assert _script_source("claim_token").endswith(_script_source("claim"))
    assert set(VERSIONED_SCRIPTS) == set(ran) - {"claim_token"}
