"""The write rate limit (seed 2.1): the Lua counter on real Redis, and 429s through the API."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from idempotency.core.hashing import current_key
from idempotency.core.ratelimit import (
    ceiling_key,
    ceiling_share,
    check_write_rate,
    hit,
    hit_with_ceiling,
    limit_per_window,
    rate_key,
    reset_rate_cache,
)
from idempotency.core.tokens import principal_quota_key
from idempotency.stores import nodes as stores
from ordering.models import Order
from tenants.models import ApiClient
from tests.conftest import api_for
from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS

REDIS_URL = django_settings.REDIS_URL or "redis://127.0.0.1:6379/0"
TOKENS = "/api/v1/idempotency-tokens/"


@pytest.fixture(autouse=True)
def fresh_rates() -> Iterator[None]:
    """No looked-up rates and no counters of the app's tenants: tenant pks restart with every
    test database, so a counter left by an earlier run would eat this run's budget."""
    reset_rate_cache()
    forget_counters()
    yield
    reset_rate_cache()
    forget_counters()


def forget_counters() -> None:
    c = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(c.scan_iter(match="rl:{t:[0-9]*", count=1000))
        if keys:
            c.delete(*keys)
    finally:
        c.close()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(REDIS_URL)
    yield c
    c.close()


@pytest.fixture
def counter_key(client: redis.Redis) -> Iterator[str]:
    """A counter key of a tenant no test database will ever have; deleted afterwards."""
    key = rate_key(tenant=f"rl-test-{uuid.uuid4().hex}", principal="p", window_seconds=60)
    yield key
    client.delete(key)


def limit(
    settings: Any,
    per_minute: int | None,
    *,
    window: int = 60,
    ceiling: int | None = None,
    **extra: Any,
) -> None:
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RATE_LIMIT_PER_MINUTE": per_minute,
        "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": ceiling,
        "RATE_LIMIT_WINDOW_SECONDS": window,
        **extra,
    }
    reset_rate_cache()
    stores.reset()


def issue(api: Any) -> Any:
    return api.post(TOKENS, {"count": 1}, format="json")


def rate_keys(client: redis.Redis, tenant: Any) -> list[bytes]:
    return list(client.scan_iter(match=f"rl:{{t:{tenant.pk}}}:*", count=1000))


# --- the counter ------------------------------------------------------------------------


def test_counter_allows_the_limit_then_refuses(client: redis.Redis, counter_key: str) -> None:
    decisions = [hit(client, key=counter_key, limit=3, window_ms=60_000) for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert [d.count for d in decisions] == [1, 2, 3, 4, 5]
    assert all(0 < d.reset_ms <= 60_000 for d in decisions)
    assert decisions[3].retry_after_seconds == 60


def test_expiry_is_set_once_so_the_window_does_not_slide(
    client: redis.Redis, counter_key: str
) -> None:
    first = hit(client, key=counter_key, limit=10, window_ms=60_000)
    time.sleep(0.05)
    second = hit(client, key=counter_key, limit=10, window_ms=60_000)
    assert first.reset_ms == 60_000
    assert second.reset_ms <= 60_000 - 40
    assert 0 < client.pttl(counter_key) <= second.reset_ms


def test_counter_without_expiry_starts_a_new_window(client: redis.Redis, counter_key: str) -> None:
    client.set(counter_key, 7)  # written by something else, with no TTL
    decision = hit(client, key=counter_key, limit=10, window_ms=5_000)
    assert decision.count == 8 and decision.reset_ms == 5_000
    assert 0 < client.pttl(counter_key) <= 5_000


def test_window_resets_after_it_ends(client: redis.Redis, counter_key: str) -> None:
    assert [hit(client, key=counter_key, limit=2, window_ms=300).allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]
    time.sleep(0.35)
    again = hit(client, key=counter_key, limit=2, window_ms=300)
    assert again.allowed and again.count == 1


def test_fifty_threads_against_a_limit_of_twenty_let_exactly_twenty_through(
    settings: Any, tenant: Any
) -> None:
    """The real path (node routing, breaker, Lua) from 50 threads at once, each on its own
    connection of the node's pool. The node's breaker tolerates any latency here: on a busy
    machine 50 calls at once can be slow enough to open it, and a call it turns away is let
    through unlimited (fail-open), which is the breaker's behaviour, not the counter's."""
    lenient = {**settings.IDEMPOTENCY["BREAKER"], "p99_threshold_ms": 60_000}
    limit(settings, 20, RATE_LIMIT_FOR_TENANT=None, BREAKER=lenient)
    stores.reset()
    barrier = threading.Barrier(50)
    allowed: list[bool] = []
    lock = threading.Lock()

    def write() -> None:
        barrier.wait()
        decision = check_write_rate(tenant=str(tenant.pk), principal="client:1/diner:storm")
        assert decision is not None
        with lock:
            allowed.append(decision.allowed)

    threads = [threading.Thread(target=write) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_SECONDS)
    assert len(allowed) == 50
    assert allowed.count(True) == 20


def test_counter_runs_on_a_redis_cluster(cluster_client: Any) -> None:
    """The script loads on the cluster (NOSCRIPT → SCRIPT LOAD) and runs in the key's slot."""
    keys = [
        rate_key(tenant=f"rl-cluster-{uuid.uuid4().hex}", principal=f"p{i}", window_seconds=60)
        for i in range(3)
    ]
    try:
        for key in keys:
            decisions = [hit(cluster_client, key=key, limit=2, window_ms=60_000) for _ in range(3)]
            assert [d.allowed for d in decisions] == [True, True, False]
    finally:
        for key in keys:
            cluster_client.delete(key)


def test_keys_share_the_tenant_hash_tag_and_name_the_window() -> None:
    key = rate_key(tenant="42", principal="client:1/diner:d", window_seconds=60)
    assert key.startswith("rl:{t:42}:") and key.endswith(":60s")
    assert key != rate_key(tenant="42", principal="client:1/diner:e", window_seconds=60)
    bucketed = {
        rate_key(tenant="42", principal=f"client:1/diner:{i}", window_seconds=60, buckets=4)
        for i in range(40)
    }
    assert {k.split("}")[0] for k in bucketed} == {f"rl:{{t:42:{b}" for b in range(4)}


def test_a_key_names_its_principal_by_a_keyed_hash(settings) -> None:
    """A client address or diner id in a counter's name was an unkeyed SHA-256: whoever read
    the key names (a Redis dump, a monitoring tool) found an IPv4 address again by hashing
    the 2**32 candidates (red: the plain SHA-256's prefix). Under another hash key the same
    principal has another name."""
    principal = "open-session:ip:203.0.113.7"
    key = rate_key(tenant="42", principal=principal, window_seconds=60)
    named = key.split(":")[3]
    assert named != hashlib.sha256(principal.encode()).hexdigest()[:16]
    assert named == hmac.digest(current_key().secret, principal.encode(), "sha256").hex()[:16]
    # the principal's token ledger is named by the same hash, which erasure looks for
    ledger = principal_quota_key(tenant="42", token="tok_x", principal=principal)
    assert ledger.endswith(f":tokq:{named}")
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": [(7, "another-secret-" * 3)]}
    assert rate_key(tenant="42", principal=principal, window_seconds=60) != key


@pytest.mark.parametrize(
    ("per_minute", "window", "expected"),
    [
        pytest.param(600, 60, 600, id="minute"),
        pytest.param(600, 1, 10, id="second"),
        pytest.param(1, 1, 1, id="at-least-one"),
        pytest.param(90, 10, 15, id="rounded-up"),
    ],
)
def test_rate_is_scaled_to_the_window(per_minute: int, window: int, expected: int) -> None:
    assert limit_per_window(per_minute, window) == expected


def test_ceiling_counts_only_what_the_principal_limit_allowed(client: redis.Redis) -> None:
    """One principal in a loop spends its own budget, never its neighbours' share."""
    tenant = f"rl-test-{uuid.uuid4().hex}"
    counter_key, *neighbours = [
        rate_key(tenant=tenant, principal=f"p{i}", window_seconds=60) for i in range(6)
    ]
    tenant_counter = ceiling_key(counter_key)
    try:
        loop = [
            hit_with_ceiling(client, key=counter_key, limit=2, ceiling=5, window_ms=60_000)
            for _ in range(10)
        ]
        assert [d.allowed for d in loop] == [True, True] + [False] * 8
        assert {d.scope for d in loop[2:]} == {"principal"}
        assert int(client.get(tenant_counter)) == 2
        others = [
            hit_with_ceiling(client, key=key, limit=2, ceiling=5, window_ms=60_000)
            for key in neighbours
        ]
        assert [d.allowed for d in others] == [True, True, True, False, False]
        assert [d.scope for d in others[3:]] == ["tenant", "tenant"]
        assert others[3].limit == 5 and others[3].count == 5
        assert int(client.get(tenant_counter)) == 5
        assert 0 < client.pttl(tenant_counter) <= 60_000
    finally:
        client.delete(tenant_counter, counter_key, *neighbours)


def test_a_request_the_ceiling_refuses_is_not_counted_on_the_tenant(client: redis.Redis) -> None:
    """Refusals leave the tenant counter at the ceiling, so a caller with a larger ceiling on
    the same counter still finds the room it was promised; the principal's own counter still
    counts its refused requests."""
    tenant = f"rl-test-{uuid.uuid4().hex}"
    keys = [rate_key(tenant=tenant, principal=f"p{i}", window_seconds=60) for i in range(10)]
    tenant_counter = ceiling_key(keys[0])
    try:
        decisions = [
            hit_with_ceiling(client, key=key, limit=5, ceiling=3, window_ms=60_000) for key in keys
        ]
        assert [d.allowed for d in decisions] == [True] * 3 + [False] * 7
        assert {(d.scope, d.count, d.limit) for d in decisions[3:]} == {("tenant", 3, 3)}
        assert int(client.get(tenant_counter)) == 3
        assert int(client.get(keys[-1])) == 1  # counted on its principal all the same
        bigger = hit_with_ceiling(client, key=keys[0], limit=5, ceiling=4, window_ms=60_000)
        assert bigger.allowed and int(client.get(tenant_counter)) == 4
    finally:
        client.delete(tenant_counter, *keys)


def test_a_refusal_on_a_tenant_counter_without_expiry_starts_its_window(
    client: redis.Redis,
) -> None:
    tenant = f"rl-test-{uuid.uuid4().hex}"
    key = rate_key(tenant=tenant, principal="p", window_seconds=60)
    tenant_counter = ceiling_key(key)
    client.set(tenant_counter, 9)  # written by something else, with no TTL
    try:
        refused = hit_with_ceiling(client, key=key, limit=5, ceiling=9, window_ms=5_000)
        assert (refused.allowed, refused.scope, refused.count) == (False, "tenant", 9)
        assert refused.reset_ms == 5_000 and 0 < client.pttl(tenant_counter) <= 5_000
    finally:
        client.delete(tenant_counter, key)


@pytest.mark.parametrize(
    ("ceiling", "share", "expected"),
    [
        pytest.param(3000, 0.8, 2400, id="guests-of-the-default"),
        pytest.param(20, 0.7, 14, id="no-float-noise"),
        pytest.param(5, 0.5, 3, id="rounded-up"),
        pytest.param(1, 0.1, 1, id="at-least-one"),
        pytest.param(7, 1.0, 7, id="whole"),
    ],
)
def test_a_share_of_the_ceiling(ceiling: int, share: float, expected: int) -> None:
    assert ceiling_share(ceiling, share) == expected


@pytest.mark.parametrize("share", [0, -0.5, 1.01])
def test_a_share_outside_0_to_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        check_write_rate(tenant="1", principal="p", share=share)


def test_half_shares_stop_at_half_the_ceiling_and_whole_shares_go_on(
    settings: Any, tenant: Any, client: redis.Redis
) -> None:
    """One tenant counter, two ceilings: writes of share 0.5 are refused once it reaches 5 of
    10, writes of share 1.0 still pass up to 10, and no refusal is counted on it."""
    limit(settings, 600, ceiling=10, RATE_LIMIT_FOR_TENANT=None, RATE_LIMIT_CEILING_FOR_TENANT=None)

    def write(principal: str, share: float) -> Any:
        decision = check_write_rate(tenant=str(tenant.pk), principal=principal, share=share)
        assert decision is not None
        return decision

    halves = [write(f"guest:{i}", 0.5) for i in range(8)]
    assert [d.allowed for d in halves] == [True] * 5 + [False] * 3
    assert {(d.scope, d.limit) for d in halves[5:]} == {("tenant", 5)}
    wholes = [write(f"merchant:{i % 2}", 1.0) for i in range(7)]
    assert [d.allowed for d in wholes] == [True] * 5 + [False] * 2
    assert {(d.scope, d.limit) for d in wholes[5:]} == {("tenant", 10)}
    assert not write("guest:late", 0.5).allowed
    tenant_counter = ceiling_key(rate_key(tenant=str(tenant.pk), principal="x", window_seconds=60))
    assert int(client.get(tenant_counter)) == 10


def test_ceiling_key_shares_the_principal_counters_hash_tag() -> None:
    key = rate_key(tenant="42", principal="diner:d", window_seconds=60)
    assert ceiling_key(key) == "rl:{t:42}:tenant:60s"
    bucketed = rate_key(tenant="42", principal="diner:d", window_seconds=10, buckets=4)
    tag = bucketed.split("}")[0]
    assert ceiling_key(bucketed) == f"{tag}}}:tenant:10s"


def test_ceiling_runs_on_a_redis_cluster_in_one_slot(cluster_client: Any) -> None:
    key = rate_key(tenant=f"rl-cluster-{uuid.uuid4().hex}", principal="p", window_seconds=60)
    try:
        decisions = [
            hit_with_ceiling(cluster_client, key=key, limit=5, ceiling=2, window_ms=60_000)
            for _ in range(3)
        ]
        assert [(d.allowed, d.scope) for d in decisions] == [
            (True, "principal"),
            (True, "principal"),
            (False, "tenant"),
        ]
    finally:
        cluster_client.delete(key)
        cluster_client.delete(ceiling_key(key))


# --- through the API --------------------------------------------------------------------


def test_the_tenant_ceiling_caps_all_diners_together(
    settings: Any, tenant: Any, other_tenant: Any
) -> None:
    limit(settings, 600, ceiling=3)
    diners = [api_for(tenant, diner=f"d{i}") for i in range(5)]
    statuses = [issue(api).status_code for api in diners]
    assert statuses == [201, 201, 201, 429, 429]
    refused = issue(diners[0])
    assert refused.json()["code"] == "RATE_LIMITED" and "ceiling" in refused.json()["detail"]
    assert issue(api_for(other_tenant, diner="d0")).status_code == 201  # its own ceiling


def test_a_tenant_ceiling_override_beats_the_default(settings: Any, tenant: Any) -> None:
    tenant.write_ceiling_per_minute = 2
    tenant.save(update_fields=["write_ceiling_per_minute"])
    limit(settings, 600, ceiling=100)
    assert [issue(api_for(tenant, diner=f"d{i}")).status_code for i in range(3)] == [
        201,
        201,
        429,
    ]


def test_a_bucketed_tenant_keeps_the_ceiling_over_all_its_buckets(
    settings: Any, tenant: Any
) -> None:
    limit(settings, 600, ceiling=8, HOT_TENANT_BUCKETS={str(tenant.pk): 4})
    statuses = [issue(api_for(tenant, diner=f"d{i}")).status_code for i in range(40)]
    # 4 buckets of ceil(8 / 4) = 2 each (40 diners fill every bucket): the ceiling in total
    assert statuses.count(201) == 8


def test_the_request_after_the_limit_is_429_with_retry_after(settings: Any, tenant: Any) -> None:
    limit(settings, 3)
    api = api_for(tenant, diner="d1")
    assert [issue(api).status_code for _ in range(3)] == [201, 201, 201]
    refused = issue(api)
    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/problem+json"
    body = refused.json()
    assert (body["code"], body["status"]) == ("RATE_LIMITED", 429)
    assert 1 <= int(refused["Retry-After"]) <= 60


def test_reads_are_not_counted(settings: Any, tenant: Any) -> None:
    limit(settings, 1)
    api = api_for(tenant, diner="d1")
    for _ in range(3):
        assert api.get("/api/v1/orders/").status_code == 200
    assert issue(api).status_code == 201
    assert issue(api).status_code == 429
    assert api.get("/api/v1/orders/").status_code == 200


def test_other_principals_and_tenants_keep_their_own_budget(
    settings: Any, tenant: Any, other_tenant: Any
) -> None:
    limit(settings, 2)
    me = api_for(tenant, diner="d1")
    assert [issue(me).status_code for _ in range(3)] == [201, 201, 429]
    assert issue(api_for(tenant, diner="d2")).status_code == 201  # another diner
    assert issue(api_for(other_tenant, diner="d1")).status_code == 201  # another tenant
    # a new session of the same diner (signed in by another key, too) is the same principal
    assert issue(api_for(tenant, diner="d1")).status_code == 429


def test_a_tenant_override_beats_the_default(settings: Any, tenant: Any, other_tenant: Any) -> None:
    tenant.write_rate_per_minute = 2
    tenant.save(update_fields=["write_rate_per_minute"])
    limit(settings, 4)
    strict = api_for(tenant, diner="d1")
    default = api_for(other_tenant, diner="d1")
    assert [issue(strict).status_code for _ in range(3)] == [201, 201, 429]
    assert [issue(default).status_code for _ in range(5)] == [201, 201, 201, 201, 429]


def test_the_limit_resets_after_a_one_second_window(settings: Any, tenant: Any) -> None:
    limit(settings, 120, window=1)  # 120 per minute = 2 per 1 s window
    api = api_for(tenant, diner="d1")
    statuses = [issue(api) for _ in range(3)]
    assert [r.status_code for r in statuses] == [201, 201, 429]
    assert statuses[2]["Retry-After"] == "1"
    time.sleep(1.05)
    assert issue(api).status_code == 201


@pytest.mark.parametrize(
    ("path", "merchant"),
    [
        pytest.param("/api/v1/orders/", False, id="create"),
        pytest.param("/api/v1/orders/{order}/pay/", False, id="pay"),
        pytest.param("/api/v1/orders/{order}/cancel/", False, id="cancel"),
        pytest.param("/api/v1/orders/{order}/transition/", True, id="transition"),
        pytest.param(TOKENS, False, id="issue-tokens"),
    ],
)
def test_every_write_endpoint_shares_the_budget(
    settings: Any, tenant: Any, menu: Any, path: str, merchant: bool
) -> None:
    limit(settings, 1)
    api = api_for(tenant, kind=ApiClient.Kind.MERCHANT) if merchant else api_for(tenant, diner="d1")
    assert issue(api).status_code == 201  # the budget is spent on another endpoint
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}
    r = api.post(path.format(order=999), body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED"
    assert Order.all_tenants.count() == 0


def test_replays_count_too(settings: Any, api: Any, menu: Any) -> None:
    limit(settings, 2)
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}
    first = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    replay = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    third = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (first["X-Idempotent-Result"], replay["X-Idempotent-Result"]) == ("MISS", "HIT")
    assert third.status_code == 429
    assert Order.all_tenants.count() == 1


def test_refused_before_the_throttle_costs_nothing(
    settings: Any, tenant: Any, client: redis.Redis
) -> None:
    limit(settings, 1)
    diner_app = api_for(tenant, diner="d1")
    for _ in range(3):  # a diner app may not move orders: 403 before the throttle runs
        r = diner_app.post("/api/v1/orders/1/transition/", {"to": "ACCEPTED"}, format="json")
        assert r.status_code == 403
    assert rate_keys(client, tenant) == []
    assert issue(diner_app).status_code == 201


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_method_the_route_does_not_answer_costs_nothing(
    settings: Any, tenant: Any, client: redis.Redis, method: str
) -> None:
    # given a budget of one write
    limit(settings, 1)
    diner_app = api_for(tenant, diner="d1")
    # when the app sends methods the write routes do not answer (a 405 for each)
    for path in (TOKENS, "/api/v1/orders/", "/api/v1/orders/1/pay/"):
        r = getattr(diner_app, method)(path, {}, format="json")
        assert (r.status_code, r.json()["code"]) == (405, "METHOD_NOT_ALLOWED")
    # then no write was counted (red: the first 405 spent the budget, the next was a 429)
    assert rate_keys(client, tenant) == []
    assert issue(diner_app).status_code == 201


# --- failing open -----------------------------------------------------------------------


def dead_redis(tenant_key: str) -> redis.Redis:
    """REDIS_CLIENT_FOR_TENANT pointing at a port nothing listens on."""
    return _dead_client()


_dead: list[redis.Redis] = []


def _dead_client() -> redis.Redis:
    if not _dead:
        _dead.append(
            redis.Redis(
                port=free_port(),
                socket_connect_timeout=0.2,
                socket_timeout=0.2,
                retry=Retry(NoBackoff(), 0),  # redis-py's default retries take ~3 s per call
            )
        )
    return _dead[0]


def place(api: Any, menu: Any) -> Any:
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}
    return api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)


@pytest.mark.parametrize(
    "resolver",
    [
        pytest.param("tests.conftest.no_redis", id="no-redis"),
        pytest.param("tests.idempotency.test_ratelimit.dead_redis", id="redis-down"),
    ],
)
def test_without_redis_writes_are_not_limited(
    settings: Any, api: Any, menu: Any, resolver: str
) -> None:
    limit(settings, 1, REDIS_CLIENT_FOR_TENANT=resolver)
    assert [place(api, menu).status_code for _ in range(3)] == [201, 201, 201]
    assert Order.all_tenants.count() == 3


def test_an_open_breaker_lets_writes_through_without_touching_the_node(
    settings: Any, tenant: Any, api: Any, menu: Any, client: redis.Redis
) -> None:
    limit(settings, 1)
    node = stores.node_for(str(tenant.pk))
    assert node is not None
    for _ in range(50):
        node.breaker.record(seconds=0.001, ok=False)
    assert node.breaker.state.value == "open"
    assert [place(api, menu).status_code for _ in range(3)] == [201, 201, 201]
    assert rate_keys(client, tenant) == []


def test_switching_the_engine_off_switches_the_limiter_off(
    settings: Any, api: Any, menu: Any
) -> None:
    limit(settings, 1, ENABLED=False)
    assert [place(api, menu).status_code for _ in range(3)] == [201, 201, 201]
