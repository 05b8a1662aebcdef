"""The engine's cost budget, in round trips (counts, never times).

- a first execution of POST /api/v1/orders/ adds at most 2 Redis round trips (claim, finish)
  and exactly one database round trip (the record insert, in the business transaction);
- a replay answered from Redis makes 0 database queries of the engine's and 1 Redis round trip:
  the claim, which appends the replay's audit to the node's stream itself (claim_audit.lua;
  the audit survives a SIGKILL of the worker: idempotency/stores/audit_stream.py), also when
  the key is a pre-issued token;
- a replay answered from the local cache makes no query and 1 Redis round trip (the XADD).
The first execution's count is batched in the process, so it costs no round trip.
Authentication (a session's cached state, or an API key's SELECT) happens before the engine and
is not its cost; the write rate limiter (one more Redis round trip when enabled) is switched off
here, as it is a separate feature (docs/idempotency.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from idempotency.models import DuplicateAudit
from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import drain_audits
from tenants.redis_routing import client_for_tenant
from tests.flows.test_idempotent_orders import post_order
from tests.idempotency.test_tokens import issue, place

pytestmark = pytest.mark.django_db


class RedisCounter:
    def __init__(self) -> None:
        self.commands: list[str] = []


@pytest.fixture
def redis_calls(tenant, monkeypatch) -> Iterator[RedisCounter]:
    """Counts every command the engine's client for ``tenant`` sends for the request (each is
    a round trip): from the test's own thread only, as the request runs in it. The client is
    shared with the process's invalidation listener, whose thread sends an echo PUBLISH every
    few seconds; counted, it landed in a measured request now and then."""
    client = client_for_tenant(str(tenant.pk))
    counter = RedisCounter()
    real = client.execute_command
    requests_thread = threading.get_ident()

    def counting(*args, **kwargs):
        if threading.get_ident() == requests_thread:
            counter.commands.append(str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "execute_command", counting)
    yield counter


@pytest.fixture(autouse=True)
def no_rate_limit(settings):
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RATE_LIMIT_PER_MINUTE": None,
        "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": None,
    }


def engine_queries(captured: CaptureQueriesContext) -> list[str]:
    """The captured SQL minus authentication, which runs before the engine."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if "tenants_apiclient" not in q["sql"] and "tenants_dinersession" not in q["sql"]
    ]


def measure(api, menu, key):
    with CaptureQueriesContext(connection) as captured:
        response = post_order(api, menu, key=key)
    return response, engine_queries(captured)


def test_first_execution_adds_two_redis_round_trips_the_database_claim_and_one_insert(
    api, menu, settings, redis_calls
):
    post_order(api, menu, key="warm-up")  # loads scripts, per-process caches
    # the same request with the engine switched off: the business work alone
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "ENABLED": False}
    off, business = measure(api, menu, "off")
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "ENABLED": True}
    redis_calls.commands.clear()
    on, with_engine = measure(api, menu, "on")
    assert off.status_code == on.status_code == 201 and on["X-Idempotent-Result"] == "MISS"
    assert redis_calls.commands == ["EVALSHA", "EVALSHA"]  # claim, finish
    extra = [q for q in with_engine if q not in business]
    # the key's database claim (ADR 0005, taken under a Redis claim too) and the record
    assert len(with_engine) == len(business) + 2, extra
    assert "pg_try_advisory_xact_lock" in " ".join(extra)
    assert "idempotency_insert_record(" in " ".join(extra)


def test_replay_from_redis_costs_one_round_trip_and_no_query(api, menu, redis_calls):
    """The claim that answers HIT appends the replay's audit itself (claim_audit.lua)."""
    first = post_order(api, menu, key="k")
    stores.local_cache().clear()  # as on another worker
    redis_calls.commands.clear()
    again, queries = measure(api, menu, "k")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert queries == []
    assert redis_calls.commands == ["EVALSHA"]


def test_replay_from_the_local_cache_costs_only_its_audit(api, menu, redis_calls):
    first = post_order(api, menu, key="k")
    redis_calls.commands.clear()
    again, queries = measure(api, menu, "k")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert queries == [] and redis_calls.commands == ["XADD"]


def test_a_token_replay_from_redis_costs_one_round_trip_and_is_audited_once(api, menu, redis_calls):
    """The token's claim (claim_token.lua + claim.lua) runs inside claim_audit.lua too."""
    token = issue(api, 1).json()["tokens"][0]
    first = place(api, menu, token)
    stores.local_cache().clear()  # the retry reaches another worker
    redis_calls.commands.clear()
    again = place(api, menu, token)
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert redis_calls.commands == ["EVALSHA"]
    drain_audits()
    [audit] = DuplicateAudit.objects.all()
    assert (audit.outcome, audit.source, audit.resource_ref) == ("HIT", "redis", first["Location"])
