"""Forgetting one principal, or a whole tenant (``idempotency.erasure``): records, audits,
Redis entries and every process's cached copy go; other principals and tenants still replay."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from idempotency import erasure
from idempotency.audit import AuditEvent
from idempotency.core.ratelimit import rate_key
from idempotency.core.tokens import principal_quota_key
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores import nodes
from idempotency.stores.audit_stream import append, drain_audits, stream_key
from idempotency.tests.conftest import caller, idem_keys, post_note, suite_redis
from idempotency.tests.testapp import executions

pytestmark = pytest.mark.django_db


def test_forgetting_a_principal_leaves_the_others(tenant: str) -> None:
    client = Client()
    first = {who: post_note(client, tenant, key="k1", principal=who) for who in ("alice", "bob")}
    post_note(client, tenant, key="k1", principal="alice")  # a replay: one audit of alice
    drain_audits()
    keys_before = len(idem_keys())
    done = erasure.forget_principal(tenant_key=tenant, principal="alice")
    assert (done.records, done.audits) == (1, 1)  # redis_keys: alice's rate counter, if any
    assert len(idem_keys()) == keys_before - 1  # the record's entry went with it
    assert not IdempotencyRecord.objects.filter(scope__startswith="alice|").exists()
    assert not DuplicateAudit.objects.filter(principal="alice").exists()
    nodes.local_cache().clear()
    again = post_note(client, tenant, key="k1", principal="bob")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first["bob"].content
    fresh = post_note(client, tenant, key="k1", principal="alice")
    assert fresh["X-Idempotent-Result"] == "MISS"


@pytest.mark.parametrize("length", [180, 250, 300], ids=["prefix-keeps-it", "cut", "over-255"])
def test_forgetting_a_principal_whose_scopes_were_too_long(tenant: str, length: int) -> None:
    """A scope too long to keep whole keeps a readable prefix and a digest; its principal's
    records, audits and Redis entries are found all the same, and nobody else's."""
    client = Client()
    principal = "p" * length
    for path in ("/notes/", "/notes/wait/"):
        for who in (principal, "bob"):
            headers = caller(tenant, who) | {"HTTP_IDEMPOTENCY_KEY": "k1"}
            for _ in range(2):  # the second one is a replay: an audit
                client.post(path, {"text": "hi"}, content_type="application/json", **headers)
    drain_audits()
    keys_before = len(idem_keys())
    done = erasure.forget_principal(tenant_key=tenant, principal=principal)
    assert (done.records, done.audits) == (2, 2)
    assert len(idem_keys()) == keys_before - 2
    assert IdempotencyRecord.objects.count() == 2
    assert set(DuplicateAudit.objects.values_list("principal", flat=True)) == {"bob"}


def test_forgetting_a_tenant_keys_and_records(tenant: str) -> None:
    client = Client()
    post_note(client, tenant, key="k1")
    other = post_note(client, f"{tenant}x", key="k1")
    assert erasure.forget_records(IdempotencyRecord.objects.filter(tenant_key=tenant)) == 1
    assert not [k for k in idem_keys() if f"{{t:{tenant}}}".encode() in k]  # went with it
    erasure.forget_tenant_keys(tenant)  # what is left: its rate counter
    left = [p for p in erasure.tenant_key_patterns(tenant) for _ in suite_redis().scan_iter(p)]
    assert left == []
    nodes.local_cache().clear()
    again = post_note(client, f"{tenant}x", key="k1")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == other.content


def test_forgetting_a_tenant_s_keys_as_the_readme_calls_it_deletes_them(tenant: str) -> None:
    """``forget_tenant_keys(tenant_key)``, called as the README shows it, deletes the keys and
    says how many (red: it was a generator, and a call that did not iterate it deleted
    nothing, silently: a data-protection erasure that never happened)."""
    post_note(Client(), tenant, key="k1")
    post_note(Client(), tenant, key="k2")
    held = [k for k in idem_keys() if f"{{t:{tenant}}}".encode() in k]
    assert len(held) >= 2
    assert erasure.forget_tenant_keys(tenant) >= len(held)
    left = [p for p in erasure.tenant_key_patterns(tenant) for _ in suite_redis().scan_iter(p)]
    assert left == []


def test_forgetting_a_tenant_s_keys_page_by_page_reports_each_page(tenant: str) -> None:
    for n in range(5):
        post_note(Client(), tenant, key=f"k{n}")
    pages = list(erasure.forget_tenant_keys_by_page(tenant, batch=2))
    assert len(pages) >= 2 and sum(pages) >= 5
    assert erasure.forget_tenant_keys(tenant) == 0  # nothing left to delete


def test_without_redis_a_result_erased_by_another_process_is_not_replayed_here(
    settings: Any, tenant: str
) -> None:
    """Database-only, no channel tells this process that another one erased a result (red:
    each process kept its answers in its own cache and replayed the erased reply, personal
    data and all, for ``LOCAL_CACHE_TTL_SECONDS``, its view not run)."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": None}
    nodes.reset()
    first = post_note(Client(), tenant, key="k1")
    assert post_note(Client(), tenant, key="k1").content == first.content  # a replay
    # another process's erasure: the records go; without Redis nothing is announced
    IdempotencyRecord.objects.filter(tenant_key=tenant).delete()
    again = post_note(Client(), tenant, key="k1")
    assert again["X-Idempotent-Result"] == "MISS"
    assert executions.runs(tenant, "k1") == 2


def test_tenant_patterns_do_not_reach_a_longer_tenant_id() -> None:
    import fnmatch

    patterns = erasure.tenant_key_patterns("1")
    assert any(fnmatch.fnmatchcase("idem:{t:1}:a:b", p) for p in patterns)
    assert any(fnmatch.fnmatchcase("rl:{t:1:3}:a:60s", p) for p in patterns)
    assert not any(fnmatch.fnmatchcase("idem:{t:12}:a:b", p) for p in patterns)


def test_forgetting_reads_only_the_stored_replies_that_show_the_principal(tenant: str) -> None:
    """The database finds the replies that show the principal, byte for byte (red when every
    reply of the tenant was read into the process to search it: one query per batch of the
    tenant's records, seconds per erasure for a busy tenant)."""
    client = Client()
    for n in range(5):
        post_note(client, tenant, key=f"b{n}", principal="bob", text=f"note {n}")
    post_note(client, tenant, key="c1", principal="carol", text="for alice")
    post_note(client, tenant, key="c2", principal="carol", text="For Alice")
    with CaptureQueriesContext(connection) as queries:
        done = erasure.forget_principal(
            tenant_key=tenant,
            principal="alice",
            also_records_showing=(b'"text":"for alice"',),
            batch=2,
        )
    assert done.records == 1
    reads = [
        q["sql"] for q in queries if q["sql"].startswith("SELECT") and "response_body" in q["sql"]
    ]
    # alice's own records (none: one empty batch), then the one batch holding carol's reply
    # that shows her and the empty batch after it; not the tenant's seven replies, two a time
    assert len(reads) == 3
    texts = {json.loads(bytes(r.response_body))["text"] for r in IdempotencyRecord.objects.all()}
    assert texts == {f"note {n}" for n in range(5)} | {"For Alice"}


def test_forgetting_a_principal_leaves_none_of_its_audits_in_the_stream(
    tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain trims what it copied exactly: an audit another caller appended between its
    read and its trim (a busy node) kept the copied entries in the stream, the forgotten
    principal's with its address and user agent, when the trim was Redis's approximate one."""
    client = Client()
    post_note(client, tenant, key="k1", principal="alice")
    post_note(client, tenant, key="k1", principal="alice")  # a replay: audited in the stream
    stream = suite_redis()
    assert b"alice" in [fields[b"p"] for _, fields in stream.xrange(stream_key())]
    real_xtrim = redis.Redis.xtrim

    def xtrim_as_another_caller_appends(node: redis.Redis, name: Any, **kwargs: Any) -> Any:
        late = AuditEvent(
            tenant_key="t-other",
            endpoint="POST notes/",
            key="k",
            outcome="HIT",
            source="redis",
            principal="bob",
        )
        append(node, late)
        return real_xtrim(node, name, **kwargs)

    monkeypatch.setattr(redis.Redis, "xtrim", xtrim_as_another_caller_appends)
    erasure.forget_principal(tenant_key=tenant, principal="alice")
    left = [fields[b"p"] for _, fields in stream.xrange(stream_key())]
    assert left == [b"bob"]


def test_forgetting_a_principal_finds_its_counters_and_ledger_named_under_an_older_key(
    tenant: str, settings: Any
) -> None:
    """Rate counters and token ledgers are named by the principal's keyed hash; after a key
    rotation, those written under the older key are still the principal's to forget (red when
    only the current key's name was looked for: both stayed), and another principal's stay."""
    older, newer = (1, "older-secret-" * 4), (2, "newer-secret-" * 4)
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": [older]}
    written = {
        who: [
            rate_key(tenant=tenant, principal=who, window_seconds=60),
            principal_quota_key(tenant=tenant, token="tok_x", principal=who),
        ]
        for who in ("alice", "bob")
    }
    client = suite_redis()
    for keys in written.values():
        for key in keys:
            client.set(key, 1, ex=60)
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": [newer, older]}  # rotated

    erasure.forget_principal(tenant_key=tenant, principal="alice")

    assert [bool(client.exists(key)) for key in written["alice"]] == [False, False]
    assert [bool(client.exists(key)) for key in written["bob"]] == [True, True]
    client.delete(*written["bob"])


class ReadsOnAReplica:
    """A host's router that reads every model from a replica and writes on ``default`` (the
    engine's checks accept it: only W003)."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


@pytest.fixture
def a_replica(settings: Any) -> Any:
    """A ``replica`` alias the host's router reads from. A real one lags behind ``default``;
    this one is never connected (the test's database guard refuses it), so any read the
    erasure sends there fails the test."""
    from django.db import connections

    settings.DATABASES = {**settings.DATABASES, "replica": dict(settings.DATABASES["default"])}
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadsOnAReplica"]
    connections._settings = None  # read DATABASES again
    connections.__dict__.pop("settings", None)
    try:
        yield connections["replica"]
    finally:
        connections["replica"].close()
        del connections["replica"]
        connections._settings = None
        connections.__dict__.pop("settings", None)


def test_forgetting_a_principal_reads_its_records_where_they_are_written(
    tenant: str, a_replica: Any
) -> None:
    """The records live on ``default`` (``idempotency.E007``), and the erasure reads them there,
    not through the host's router (red: it read them from the replica, here refused; with a
    real replica behind, a record not yet replicated was not erased, ``records=0``, and the
    erased principal's key went on replaying its answer from the database)."""
    first = post_note(Client(), tenant, key="k1", principal="alice")
    assert first.status_code == 201
    done = erasure.forget_principal(tenant_key=tenant, principal="alice")
    assert done.records == 1 and a_replica.connection is None
    assert not IdempotencyRecord.objects.using("default").filter(tenant_key=tenant).exists()
    nodes.local_cache().clear()
    again = post_note(Client(), tenant, key="k1", principal="alice")
    assert again["X-Idempotent-Result"] == "MISS"
