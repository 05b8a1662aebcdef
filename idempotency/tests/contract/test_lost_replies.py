"""A Redis call that ran but whose reply was lost on the way back.

Both calls of a request that change something before its answer are covered: the claim, and
a duplicate's audit (the ``XADD`` to the node's audit stream, or the claim itself when it
answers a replay, either of which the re-sent call appends a second time: the drain writes
the event once).

A redis-py client with a ``Retry`` (redis-py's cluster client has one by default) re-sends a
call when its connection drops or times out. For the claim, the re-sent call finds the claim
the lost call made, under the same owner token: it must be answered as that call was (MISS),
or a request nothing else holds is refused as in progress until the lease runs out. A proxy
in front of the suite's Redis (``lossy_proxy.py``) loses the reply; the tenant's client
(``REDIS_CLIENT_FOR_TENANT``) re-sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from idempotency.models import DuplicateAudit, OutcomeCount
from idempotency.stores import nodes
from idempotency.stores.audit_stream import drain_audits, stream_key
from idempotency.tests.conftest import idem_keys, post_note, suite_redis
from idempotency.tests.contract.lossy_proxy import LossyProxy
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


_clients: list[redis.Redis] = []


def retrying_client(tenant_key: str) -> redis.Redis:
    """These tests' ``REDIS_CLIENT_FOR_TENANT``: through the proxy, re-sending what failed."""
    return _clients[-1]


@pytest.fixture
def lossy(settings: Any) -> Iterator[LossyProxy]:
    """The engine's Redis, reached through a proxy that can lose a reply."""
    server = urlparse(settings.REDIS_URL)
    proxy = LossyProxy(server.hostname or "127.0.0.1", server.port or 6379)
    _clients.append(
        redis.Redis(
            port=proxy.port,
            db=int((server.path or "/0").lstrip("/") or 0),
            socket_timeout=5,
            retry=Retry(NoBackoff(), retries=3),
        )
    )
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": f"{__name__}.retrying_client",
    }
    nodes.reset()
    yield proxy
    nodes.reset()
    _clients.pop().close()
    proxy.close()


def test_a_claim_whose_reply_was_lost_is_answered_as_the_claim_it_made(lossy, tenant):
    client = Client()
    # a first request loads the scripts, so the next claim runs at once (no NOSCRIPT round)
    assert post_note(client, tenant, key="warm-up")["X-Idempotent-Result"] == "MISS"
    lossy.lose_reply_to(b"EVALSHA", f"idem:{{t:{tenant}}}:".encode())  # the claim

    first = post_note(client, tenant, key="lost-reply", text="once")

    [lost] = lossy.lost
    # the claim ran in Redis (its key is there), and its reply never came back
    [key] = [k for k in idem_keys() if k in lost]
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert executions.runs(tenant, "lost-reply") == 1
    assert suite_redis().hget(key, "st") == b"d"
    replay = post_note(client, tenant, key="lost-reply", text="once")
    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == first.content
    assert Note.objects.filter(text="once").count() == 1


def test_a_claim_held_by_another_request_is_still_in_progress(tenant):
    store = nodes.node_for(tenant)
    assert store is not None
    claim = {
        "key": f"idem:{{t:{tenant}}}:held",
        "fingerprints": {1: "fp"},
        "current_version": 1,
        "lease_ms": 60_000,
        "field_hashes": None,
    }
    assert store.claim(owner="first", **claim).outcome.value == "MISS"
    assert store.claim(owner="first", **claim).outcome.value == "MISS"  # the same call, again
    assert store.claim(owner="second", **claim).outcome.value == "IN_PROGRESS"


def test_an_audit_whose_reply_was_lost_is_written_once(lossy, tenant):
    client = Client()
    first = post_note(client, tenant, key="audited")
    lossy.lose_reply_to(b"XADD")

    replay = post_note(client, tenant, key="audited")

    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == first.content
    assert len(lossy.lost) == 1 and suite_redis().xlen(stream_key()) == 2  # appended twice
    drain_audits()
    assert DuplicateAudit.objects.filter(tenant_key=tenant).count() == 1
    hits = OutcomeCount.objects.filter(tenant_key=tenant, outcome="HIT")
    assert [row.count for row in hits] == [1]


def test_a_replay_whose_claim_reply_was_lost_is_audited_once(lossy, tenant):
    client = Client()
    first = post_note(client, tenant, key="audited-by-claim")
    nodes.local_cache().clear()  # the replay is served by Redis, as on another worker
    lossy.lose_reply_to(b"EVALSHA", f"idem:{{t:{tenant}}}:".encode())  # the claim

    replay = post_note(client, tenant, key="audited-by-claim")

    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == first.content
    # the claim appended the audit itself, and again when it was re-sent
    assert len(lossy.lost) == 1 and suite_redis().xlen(stream_key()) == 2
    drain_audits()
    [audit] = DuplicateAudit.objects.filter(tenant_key=tenant)
    assert (audit.outcome, audit.source) == ("HIT", "redis")
    hits = OutcomeCount.objects.filter(tenant_key=tenant, outcome="HIT")
    assert [row.count for row in hits] == [1]
