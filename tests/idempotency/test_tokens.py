"""Pre-issued one-time tokens (seed 2.4): issuing, consuming as Idempotency-Key, batch check.

Through the API with DRF's test client against real PostgreSQL and Redis; the Lua-level
races and the Redis Cluster slot rule against the store directly.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from redis.cluster import RedisCluster
from rest_framework import serializers

from idempotency.core.keys import redis_key_for
from idempotency.core.outcomes import Outcome, StoredResponse
from idempotency.core.ratelimit import reset_rate_cache
from idempotency.core.tokens import (
    InvalidToken,
    TokenStatus,
    new_tokens,
    read_token_states,
    sign_token,
    store_tokens,
    token_key,
    token_use,
    verify_token,
)
from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import nodes as stores
from idempotency.stores.breaker import BreakerState
from idempotency.stores.redis_store import RedisIdempotencyStore, TokenRefusal, new_owner_token
from ordering.models import Order, Payment
from tests.conftest import api_for

REDIS_URL = django_settings.REDIS_URL or "redis://127.0.0.1:6379/0"
TOKENS = "/api/v1/idempotency-tokens/"
CHECK = "/api/v1/idempotency-tokens/check/"


@pytest.fixture(autouse=True)
def no_rate_limit(settings: Any) -> None:
    """Tokens are tested on their own; the write limiter has its own tests."""
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RATE_LIMIT_PER_MINUTE": None,
        "RATE_LIMIT_FOR_TENANT": None,
        "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": None,
    }
    reset_rate_cache()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(REDIS_URL)
    yield c
    c.close()


def issue(api: Any, count: Any = 3) -> Any:
    return api.post(TOKENS, {"count": count}, format="json")


def order_body(menu: Any, quantity: int = 1) -> dict[str, Any]:
    return {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": quantity}],
        "payment_method": "card",
    }


def place(api: Any, menu: Any, token: str, quantity: int = 1) -> Any:
    return api.post(
        "/api/v1/orders/", order_body(menu, quantity), format="json", HTTP_IDEMPOTENCY_KEY=token
    )


def principal_of(api: Any) -> str:
    """The principal the engine sees for ``api`` (the session's diner), from its own request."""
    response = api.get("/api/v1/orders/")
    principal = response.wsgi_request.user.principal_id
    return principal


# --- issuing ----------------------------------------------------------------------------


def test_issue_returns_signed_tokens_stored_unused_with_a_ttl(
    api: Any, tenant: Any, client: redis.Redis
) -> None:
    before = timezone.now()
    r = issue(api, 3)
    assert r.status_code == 201
    body = r.json()
    assert len(body["tokens"]) == len(set(body["tokens"])) == 3
    assert body["ttl_seconds"] == 24 * 3600
    expires = timezone.datetime.fromisoformat(body["expires_at"])
    assert before + timedelta(hours=24) <= expires <= timezone.now() + timedelta(hours=24)
    principal = principal_of(api)
    for token in body["tokens"]:
        assert token.startswith("tok_") and len(token) == 49
        verify_token(token, tenant=str(tenant.pk), principal=principal)
        key = token_key(tenant=str(tenant.pk), token=token)
        assert key.startswith(f"idem:{{t:{tenant.pk}}}:tok:")
        assert client.get(key) == f"p:{principal}".encode()
        assert 24 * 3600 * 1000 - 5_000 < client.pttl(key) <= 24 * 3600 * 1000


def test_count_defaults_to_one(api: Any) -> None:
    r = api.post(TOKENS, {}, format="json")
    assert r.status_code == 201 and len(r.json()["tokens"]) == 1


@pytest.mark.parametrize(
    "count",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param(1001, id="over-1000"),
        pytest.param("many", id="not-a-number"),
        # numbers in another JSON type are not coerced
        pytest.param("5", id="a-string-of-digits"),
        pytest.param(5.0, id="a-float"),
        pytest.param(True, id="true"),
    ],
)
def test_count_out_of_range_is_a_validation_error(
    api: Any, client: redis.Redis, count: Any
) -> None:
    r = issue(api, count)
    assert r.status_code == 400
    assert r.json()["code"] == "VALIDATION_ERROR" and "count" in r.json()["errors"]


def test_a_thousand_tokens_in_one_round_trip(
    settings: Any, api: Any, tenant: Any, client: redis.Redis
) -> None:
    counting = use_counting_client(settings)
    principal_of(api)  # authenticate once outside the count (no Redis involved anyway)
    issue(api, 1)  # the server has the issuing script loaded from now on (EVALSHA hits)
    counting.reset()
    r = issue(api, 1000)
    assert r.status_code == 201 and len(r.json()["tokens"]) == 1000
    assert counting.sends == 1
    keys = [token_key(tenant=str(tenant.pk), token=t) for t in r.json()["tokens"]]
    assert sum(client.exists(*keys[i : i + 100]) for i in range(0, 1000, 100)) == 1000


def test_issuing_without_redis_is_503(settings: Any, api: Any) -> None:
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
    }
    stores.reset()
    for r in (issue(api), api.post(CHECK, {"tokens": ["tok_x"]}, format="json")):
        assert r.status_code == 503
        assert r.json()["code"] == "IDEMPOTENCY_TOKENS_UNAVAILABLE"
        assert r["Retry-After"] == "5"


def test_token_calls_probe_a_half_open_breaker_and_close_it(api: Any, tenant: Any) -> None:
    # given the tenant's node breaker opened by an outage that is over (its open time passed)
    node = stores.node_for(str(tenant.pk))
    assert node is not None
    node.breaker._open(node.breaker._clock() - 3600, "an outage, over since")
    assert node.breaker.state is BreakerState.HALF_OPEN
    # when an app that writes only with tokens asks for tokens, then it gets them: each call
    # is a probe, and healthy probes close the breaker (it answered 503 until other traffic's
    # claims had closed it)
    answers = [issue(api).status_code for _ in range(3)]
    assert answers == [201, 201, 201]
    assert node.breaker.state is BreakerState.CLOSED


# --- using a token as Idempotency-Key ---------------------------------------------------


def test_token_executes_once_replays_and_refuses_another_payload(
    api: Any, menu: Any, tenant: Any, client: redis.Redis
) -> None:
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    again = place(api, menu, token)
    other = place(api, menu, token, quantity=2)
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert other.status_code == 422 and other.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert Order.all_tenants.count() == 1
    mark = client.get(token_key(tenant=str(tenant.pk), token=token))
    assert mark is not None and mark.startswith(b"u:idem:{t:")


def test_a_used_token_s_mark_lives_as_long_as_its_result_not_the_token_s_ttl(
    api: Any, menu: Any, tenant: Any, client: redis.Redis
) -> None:
    """An unused token lives TOKEN_TTL_SECONDS (24 h); once used, its mark names the operation
    for as long as the result replays (the record TTL, 72 h here), as docs/data-protection.md's
    table of Redis keys now says (it said 24 h for both)."""
    token = issue(api).json()["tokens"][0]
    place(api, menu, token)
    [entry] = (
        key for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*") if b":tok" not in key
    )

    mark_ms = client.pttl(token_key(tenant=str(tenant.pk), token=token))

    assert 72 * 3600 * 1000 - 5_000 < mark_ms <= 72 * 3600 * 1000
    assert abs(mark_ms - client.pttl(entry)) < 5_000


def test_a_used_token_is_refused_for_another_operation(api: Any, menu: Any) -> None:
    token = issue(api).json()["tokens"][0]
    order_id = place(api, menu, token).json()["id"]
    r = api.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY=token)
    assert r.status_code == 409 and r.json()["code"] == "IDEMPOTENCY_TOKEN_USED"
    assert Payment.all_tenants.count() == 0


def test_a_token_spent_on_one_order_is_reused_for_another_order(api: Any, menu: Any) -> None:
    """A consumed token is its endpoint's key: another order id on the same endpoint is
    another payload (422), as with any key."""
    a, b = (place(api, menu, key).json()["id"] for key in issue(api, 2).json()["tokens"])
    token = issue(api, 1).json()["tokens"][0]
    assert api.post(f"/api/v1/orders/{a}/pay/", HTTP_IDEMPOTENCY_KEY=token).status_code == 200
    r = api.post(f"/api/v1/orders/{b}/pay/", HTTP_IDEMPOTENCY_KEY=token)
    assert r.status_code == 422 and r.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert Payment.all_tenants.count() == 1


def test_a_signed_but_never_issued_token_is_refused(api: Any, menu: Any, tenant: Any) -> None:
    crafted = sign_token(tenant=str(tenant.pk), principal=principal_of(api), token_id="A" * 22)
    r = place(api, menu, crafted)
    assert r.status_code == 422 and r.json()["code"] == "IDEMPOTENCY_TOKEN_UNKNOWN"
    assert Order.all_tenants.count() == 0


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"), id="forged-mac"),
        pytest.param(lambda t: "tok_" + "B" * 22 + t[26:], id="other-id-same-mac"),
        pytest.param(lambda t: t[:30], id="truncated"),
        pytest.param(lambda t: "tok_my-own-key", id="plain-key-with-token-prefix"),
    ],
)
def test_forged_or_malformed_tokens_are_400_without_redis(
    settings: Any, api: Any, menu: Any, mangle: Any
) -> None:
    token = issue(api).json()["tokens"][0]
    counting = use_counting_client(settings)
    r = place(api, menu, mangle(token))
    assert r.status_code == 400 and r.json()["code"] == "IDEMPOTENCY_TOKEN_INVALID"
    assert counting.sends == 0  # refused by arithmetic (the limiter is off here)
    assert Order.all_tenants.count() == 0


def test_another_diner_or_tenant_cannot_use_my_token(
    api: Any, tenant: Any, other_tenant: Any, menu: Any
) -> None:
    from tests.conftest import menu_for

    token = issue(api).json()["tokens"][0]
    for stranger, their_menu in (
        (api_for(tenant, diner="diner-2"), menu),
        (api_for(tenant, kind="merchant"), menu),  # the restaurant's own server key
        (api_for(other_tenant, diner="diner-1"), menu_for(other_tenant)),
    ):
        r = place(stranger, their_menu, token)
        if r.status_code == 403:  # a merchant key cannot place orders at all
            r = stranger.post(CHECK, {"tokens": [token]}, format="json")
            assert r.json()["results"][0]["status"] == "invalid"
            continue
        assert r.status_code == 400 and r.json()["code"] == "IDEMPOTENCY_TOKEN_INVALID"
    assert Order.all_tenants.count() == 0
    # the same diner in another session (a refresh, a second device) keeps its tokens
    assert place(api_for(tenant, diner="diner-1"), menu, token).status_code == 201


def test_a_5xx_keeps_the_token_for_the_retry(api: Any, menu: Any, monkeypatch: Any) -> None:
    from ordering.api import views

    real = views.place_order
    calls: list[int] = []

    def flaky(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        return real(**kwargs)

    monkeypatch.setattr(views, "place_order", flaky)
    api.raise_request_exception = False
    token = issue(api).json()["tokens"][0]
    assert place(api, menu, token).status_code == 500
    retried = place(api, menu, token)
    assert retried.status_code == 201 and retried["X-Idempotent-Result"] == "MISS"
    assert Order.all_tenants.count() == 1


def test_redis_losing_claim_and_token_still_replays_from_the_database(
    api: Any, menu: Any, client: redis.Redis, tenant: Any
) -> None:
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"):  # eviction, failover
        client.delete(key)
    stores.local_cache().clear()
    again = place(api, menu, token)
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert Order.all_tenants.count() == 1


def test_database_only_mode_accepts_a_signed_token_as_a_plain_key(
    settings: Any, api: Any, menu: Any
) -> None:
    token = issue(api).json()["tokens"][0]
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
    }
    stores.reset()
    first = place(api, menu, token)
    again = place(api, menu, token)
    assert (first["X-Idempotent-Result"], again["X-Idempotent-Result"]) == ("MISS", "HIT")
    assert (
        place(api, menu, token[:-1] + "x" if token[-1] != "x" else token[:-1] + "y").json()["code"]
        == "IDEMPOTENCY_TOKEN_INVALID"
    )
    assert Order.all_tenants.count() == 1


def test_a_token_used_while_redis_was_away_is_unused_to_redis_once_it_is_back(
    settings: Any, api: Any, menu: Any
) -> None:
    """As docs/idempotency.md says: its use is not marked in Redis, so once Redis is back it
    checks as unused, and its own endpoint replays from the database; its own endpoint's next
    use binds it there again, and used first on another endpoint, it serves that one."""
    replayed_first, paid_first = issue(api, 2).json()["tokens"]
    with_redis = settings.IDEMPOTENCY
    settings.IDEMPOTENCY = {**with_redis, "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis"}
    stores.reset()
    orders = {token: place(api, menu, token) for token in (replayed_first, paid_first)}
    assert [o.status_code for o in orders.values()] == [201, 201]
    settings.IDEMPOTENCY = with_redis
    stores.reset()
    stores.local_cache().clear()
    checked = api.post(CHECK, {"tokens": list(orders)}, format="json").json()["results"]
    assert [r["status"] for r in checked] == ["unused", "unused"]

    def pay(token: str) -> Any:
        order_id = orders[token].json()["id"]
        return api.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY=token)

    # its own endpoint first: the replay, and the token is that endpoint's again
    again = place(api, menu, replayed_first)
    assert again["X-Idempotent-Result"] == "HIT" and again.content == orders[replayed_first].content
    used = pay(replayed_first)
    assert used.status_code == 409, (used.status_code, used.content)
    assert used.json()["code"] == "IDEMPOTENCY_TOKEN_USED"
    # another endpoint first: it serves that one; its own endpoint still replays
    assert pay(paid_first).status_code == 200
    retried = place(api, menu, paid_first)
    assert retried["X-Idempotent-Result"] == "HIT" and retried.content == orders[paid_first].content
    assert Order.all_tenants.count() == 2


def test_an_unused_token_is_unknown_after_redis_lost_its_data(
    api: Any, menu: Any, client: redis.Redis, tenant: Any
) -> None:
    token = issue(api).json()["tokens"][0]
    for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"):  # restarted empty
        client.delete(key)
    refused = place(api, menu, token)
    assert refused.status_code == 422 and refused.json()["code"] == "IDEMPOTENCY_TOKEN_UNKNOWN"
    assert Order.all_tenants.count() == 0


def test_a_used_token_checks_unknown_after_redis_lost_its_data_yet_its_order_replays(
    api: Any, menu: Any, client: redis.Redis, tenant: Any
) -> None:
    """``unknown`` says Redis does not hold the token, not that it did nothing: the check reads
    Redis alone, while the order the token placed answers its retry from the database."""
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"):  # restarted empty
        client.delete(key)
    stores.local_cache().clear()  # and a process that has not seen the answer

    checked = api.post(CHECK, {"tokens": [token]}, format="json")
    again = place(api, menu, token)

    assert checked.json()["results"] == [{"token": token, "status": "unknown"}]
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert Order.all_tenants.count() == 1


def test_an_unused_token_redis_lost_is_refused_as_lost_not_only_as_expired(
    api: Any, menu: Any, client: redis.Redis, tenant: Any
) -> None:
    """A token issued moments ago, unused, that Redis lost with its data (restarted empty) is
    422 IDEMPOTENCY_TOKEN_UNKNOWN, and its words say that can be why: they said only "has
    expired or was never issued", which a diner's app, holding a token it was issued a
    minute before, could not square with either (red: no word of lost data)."""
    token = issue(api).json()["tokens"][0]
    for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"):  # restarted empty
        client.delete(key)

    refused = place(api, menu, token)

    assert refused.status_code == 422
    assert refused.json()["code"] == "IDEMPOTENCY_TOKEN_UNKNOWN"
    assert "lost" in refused.json()["detail"], refused.json()["detail"]
    assert Order.all_tenants.count() == 0


def test_a_token_whose_mark_and_record_are_gone_names_the_order_it_placed(
    api: Any, menu: Any, client: redis.Redis, tenant: Any
) -> None:
    """Past the retention the record is purged and the token's mark expires with it: the retry
    is answered by the order the token placed, 409 ORDER_ALREADY_PLACED as for any key, not
    422 IDEMPOTENCY_TOKEN_UNKNOWN, whose "take a new token" placed the order a second time
    (red: 422)."""
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    purge_record(IdempotencyRecord.objects.get())
    client.delete(token_key(tenant=str(tenant.pk), token=token))  # its TTL, the retention's

    again = place(api, menu, token)

    assert again.status_code == 409, again.content
    assert again.json()["code"] == "ORDER_ALREADY_PLACED"
    assert again.json()["order_id"] == first.json()["id"]
    assert again["Location"] == first["Location"]
    assert Order.all_tenants.count() == 1
    assert IdempotencyRecord.objects.count() == 0  # the order answers every retry, not a record


def test_a_used_token_replays_once_the_secret_key_that_signed_it_is_dropped(
    api: Any, menu: Any, tenant: Any, settings: Any
) -> None:
    """A rotation keeps the old SECRET_KEY a day (README), an unused token's life; a used token
    stays its operation's key for the retention (72 h). Retried on day two, the old key
    dropped, it was refused 400 IDEMPOTENCY_TOKEN_INVALID, "not issued to this caller", which
    the client libraries do not retry: an app that took a new token ordered again (red: 400)."""
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    settings.SECRET_KEY = "rotated-" + "k" * 60
    settings.SECRET_KEY_FALLBACKS = []
    refreshed = api_for(tenant, diner="diner-1")  # the session, refreshed under the new key

    again = place(refreshed, menu, token)

    assert again.status_code == 201, again.content
    assert again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert Order.all_tenants.count() == 1


def test_an_unused_token_outliving_the_dropped_key_that_signed_it_is_refused(
    api: Any, menu: Any, tenant: Any, settings: Any
) -> None:
    """README's rotation: the old SECRET_KEY is kept for the longer of a day and the tokens'
    lifetime. A token issued for a week and unused is refused once its key is dropped, on
    its first day still, though Redis holds it unused."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_TTL_SECONDS": 7 * 86400}
    issued = issue(api).json()
    assert issued["ttl_seconds"] == 7 * 86400
    token = issued["tokens"][0]
    settings.SECRET_KEY = "rotated-" + "k" * 60
    settings.SECRET_KEY_FALLBACKS = []

    refused = place(api_for(tenant, diner="diner-1"), menu, token)

    assert refused.status_code == 400 and refused.json()["code"] == "IDEMPOTENCY_TOKEN_INVALID"
    assert Order.all_tenants.count() == 0


def test_a_token_signed_under_a_dropped_key_whose_record_is_gone_names_its_order(
    api: Any, menu: Any, tenant: Any, settings: Any
) -> None:
    """Past the record too, the order the token placed answers, as for a token still verified
    (409 ORDER_ALREADY_PLACED), not 400 IDEMPOTENCY_TOKEN_INVALID."""
    token = issue(api).json()["tokens"][0]
    first = place(api, menu, token)
    purge_record(IdempotencyRecord.objects.get())
    settings.SECRET_KEY = "rotated-" + "k" * 60
    settings.SECRET_KEY_FALLBACKS = []

    again = place(api_for(tenant, diner="diner-1"), menu, token)

    assert again.status_code == 409, again.content
    assert again.json()["code"] == "ORDER_ALREADY_PLACED"
    assert again.json()["order_id"] == first.json()["id"]
    assert Order.all_tenants.count() == 1


def test_a_token_signed_under_a_dropped_key_is_still_refused_where_it_did_nothing(
    api: Any, menu: Any, tenant: Any, settings: Any
) -> None:
    """Only the operation the token keyed replays: unused, or on another endpoint, a token
    whose signing key was dropped is refused as before, and nothing runs."""
    unused, spent = issue(api, 2).json()["tokens"]
    order_id = place(api, menu, spent).json()["id"]
    settings.SECRET_KEY = "rotated-" + "k" * 60
    settings.SECRET_KEY_FALLBACKS = []
    refreshed = api_for(tenant, diner="diner-1")

    refusals = [
        place(refreshed, menu, unused),
        refreshed.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY=spent),
    ]

    assert [r.status_code for r in refusals] == [400, 400]
    assert {r.json()["code"] for r in refusals} == {"IDEMPOTENCY_TOKEN_INVALID"}
    assert Order.all_tenants.count() == 1 and Payment.all_tenants.count() == 0


# --- batch check ------------------------------------------------------------------------


def test_batch_check_reports_each_token_in_one_round_trip(
    settings: Any, api: Any, menu: Any, tenant: Any
) -> None:
    unused, used = issue(api, 2).json()["tokens"]
    place(api, menu, used)
    unknown = sign_token(tenant=str(tenant.pk), principal=principal_of(api), token_id="C" * 22)
    foreign = issue(api_for(tenant, diner="diner-2"), 1).json()["tokens"][0]
    forged = unused[:-1] + ("A" if unused[-1] != "A" else "B")
    given = [used, "garbage", unused, unknown, foreign, forged]
    counting = use_counting_client(settings)
    r = api.post(CHECK, {"tokens": given}, format="json")
    assert r.status_code == 200
    assert r.json()["results"] == [
        {"token": used, "status": "used"},
        {"token": "garbage", "status": "invalid"},
        {"token": unused, "status": "unused"},
        {"token": unknown, "status": "unknown"},
        {"token": foreign, "status": "invalid"},
        {"token": forged, "status": "invalid"},
    ]
    assert counting.sends == 1


def test_the_schema_names_every_status_a_check_answers_and_no_other(
    api: Any, menu: Any, tenant: Any
) -> None:
    # a client generated from the schema switches on a token's status: it was declared as any
    # string, its four values only in a description
    unused, used = issue(api, 2).json()["tokens"]
    place(api, menu, used)
    unknown = sign_token(tenant=str(tenant.pk), principal=principal_of(api), token_id="C" * 22)
    checked = api.post(CHECK, {"tokens": [used, unused, unknown, "garbage"]}, format="json")
    answered = {result["status"] for result in checked.json()["results"]}

    schema = Client().get("/api/schema/", {"format": "json"}).json()
    declared = schema["components"]["schemas"]["TokenCheckResult"]["properties"]["status"]
    ref = declared.get("$ref") or declared.get("allOf", [{}])[0].get("$ref")
    if ref:  # an enum of its own, named beside its description
        declared = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]

    assert answered == {"unused", "used", "unknown", "invalid"}
    assert sorted(declared.get("enum", [])) == sorted(answered), declared


@pytest.mark.parametrize(
    "tokens",
    [
        pytest.param([], id="empty"),
        pytest.param(["t"] * 1001, id="over-1000"),
        pytest.param([12345], id="a-number-for-a-token"),
    ],
)
def test_batch_check_size_is_validated(api: Any, tokens: list[str]) -> None:
    r = api.post(CHECK, {"tokens": tokens}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("token", ["", "t", "t" * 255, "t" * 256], ids=len)
def test_the_schema_s_token_bounds_are_those_a_check_takes(api: Any, token: str) -> None:
    # An empty token is refused (400) and the schema declared no minLength: a client generated
    # from it could send one.
    schema = Client().get("/api/schema/", {"format": "json"}).json()
    declared = schema["components"]["schemas"]["CheckTokensIn"]["properties"]["tokens"]["items"]
    admitted = declared.get("minLength", 0) <= len(token) <= declared["maxLength"]
    r = api.post(CHECK, {"tokens": [token]}, format="json")
    assert (r.status_code == 200) == admitted, (declared, r.status_code, r.content)


def test_a_token_holding_a_nul_is_answered_invalid_as_any_malformed_one(api: Any) -> None:
    # The schema admits any string of 1-255 characters, and a malformed token is answered
    # "invalid" in the batch's 200; one holding a NUL made the whole batch a 400
    # VALIDATION_ERROR ("Null characters are not allowed"), the other tokens unanswered.
    [unused] = issue(api, 1).json()["tokens"]
    given = [unused, "tok_\x00", unused[:8] + "\x00" + unused[9:]]
    r = api.post(CHECK, {"tokens": given}, format="json")
    assert r.status_code == 200, r.content
    assert [result["status"] for result in r.json()["results"]] == ["unused", "invalid", "invalid"]
    assert [result["token"] for result in r.json()["results"]] == given


@pytest.fixture
def validated_tokens(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The token values the check's serializer validated, one by one."""
    seen: list[object] = []
    validate = serializers.CharField.run_validation

    def counting(field: serializers.CharField, data: object = serializers.empty) -> object:
        seen.append(data)
        return validate(field, data)

    monkeypatch.setattr(serializers.CharField, "run_validation", counting)
    return seen


def test_an_over_long_check_is_refused_before_any_token_is_validated(
    api: Any, validated_tokens: list[object]
) -> None:
    # given one element more than a batch holds, none of them a token
    r = api.post(CHECK, {"tokens": [[]] * 1001}, format="json")
    # then one message, no element looked at, and a small answer
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert r.json()["errors"] == {"tokens": ["Ensure this field has no more than 1000 elements."]}
    assert validated_tokens == []
    assert len(r.content) < 300


def test_a_check_of_bad_elements_names_only_the_first_few(
    api: Any, validated_tokens: list[object]
) -> None:
    r = api.post(CHECK, {"tokens": [[]] * 1000}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert sorted(r.json()["errors"]["tokens"], key=int) == [str(i) for i in range(10)]
    assert len(validated_tokens) == 10
    assert len(r.content) < 1000


def test_the_probe_s_megabyte_of_empty_lists_is_refused_by_the_parser(
    api: Any, validated_tokens: list[object]
) -> None:
    # the probe's body: 340,000 [] (just under 1 MiB; 13-17 s of a worker and an 11 MB answer
    # before)
    body = b'{"tokens":[' + b",".join([b"[]"] * 340_000) + b"]}"
    r = api.generic("POST", CHECK, body, content_type="application/json")
    assert r.status_code == 400 and r.json()["code"] == "INVALID_JSON"
    assert "more than 10000 values" in r.json()["detail"]
    assert validated_tokens == []
    assert len(r.content) < 300


def test_the_schema_gives_this_deployment_s_batch_bounds(settings: Any, api: Any) -> None:
    # the bound is the engine's TOKEN_MAX_BATCH, enforced and published alike
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_MAX_BATCH": 20}
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    shapes = schema["components"]["schemas"]
    assert shapes["IssueTokensIn"]["properties"]["count"] | {"default": 1} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "default": 1,
        "nullable": True,  # a top-level null is the count left out (config/schema_hooks.py)
    }
    tokens = shapes["CheckTokensIn"]["properties"]["tokens"]
    assert (tokens["minItems"], tokens["maxItems"]) == (1, 20)
    assert issue(api, 21).status_code == 400 and issue(api, 20).status_code == 201
    over = api.post(CHECK, {"tokens": ["t"] * 21}, format="json")
    assert over.status_code == 400 and "tokens" in over.json()["errors"]


# --- the Lua consume, directly ----------------------------------------------------------


@pytest.fixture
def lua_tenant(client: redis.Redis) -> Iterator[str]:
    tenant = f"tok-test-{uuid.uuid4().hex}"
    yield tenant
    keys = list(client.scan_iter(match=f"idem:{{t:{tenant}*", count=1000))
    if keys:
        client.delete(*keys)


FP = hashlib.sha256(b"payload").hexdigest()


def claim(store: RedisIdempotencyStore, *, tenant: str, token: str, route: str, **kw: Any) -> Any:
    claim_key = redis_key_for(tenant=tenant, scope=f"p|POST|{route}", key=token)
    use = token_use(
        tenant=tenant,
        principal="p",
        token=token,
        claim_key=claim_key,
        mark_ttl_seconds=60,
        buckets=1,
    )
    owner = new_owner_token()
    result = store.claim(
        key=claim_key,
        fingerprints={1: FP},
        current_version=1,
        owner=owner,
        lease_ms=kw.get("lease_ms", 10_000),
        token=use,
    )
    return result, claim_key, owner


def test_twenty_operations_racing_for_one_token_one_wins(
    client: redis.Redis, lua_tenant: str
) -> None:
    [token] = new_tokens(tenant=lua_tenant, principal="p", count=1)
    store_tokens(client, tenant=lua_tenant, principal="p", tokens=[token], ttl_seconds=60)
    barrier = threading.Barrier(20)
    results: list[Any] = []

    def race(i: int) -> None:
        own = redis.Redis.from_url(REDIS_URL)
        try:
            barrier.wait()
            result, _, _ = claim(
                RedisIdempotencyStore(own), tenant=lua_tenant, token=token, route=f"r{i}"
            )
            results.append(result)
        finally:
            own.close()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    misses = [r for r in results if not isinstance(r, TokenRefusal)]
    assert len(results) == 20 and len(misses) == 1 and misses[0].outcome is Outcome.MISS
    assert [r.reason for r in results if isinstance(r, TokenRefusal)] == ["used"] * 19


def test_the_same_operation_claims_again_after_release_or_lease_expiry(
    client: redis.Redis, lua_tenant: str
) -> None:
    store = RedisIdempotencyStore(client)
    [token] = new_tokens(tenant=lua_tenant, principal="p", count=1)
    store_tokens(client, tenant=lua_tenant, principal="p", tokens=[token], ttl_seconds=60)
    first, claim_key, owner = claim(store, tenant=lua_tenant, token=token, route="a")
    assert first.outcome is Outcome.MISS
    store.release(key=claim_key, owner=owner)  # a 5xx before commit
    second, _, _ = claim(store, tenant=lua_tenant, token=token, route="a", lease_ms=50)
    assert second.outcome is Outcome.MISS
    time.sleep(0.1)  # the request crashed; its lease expires
    third, _, owner = claim(store, tenant=lua_tenant, token=token, route="a")
    assert third.outcome is Outcome.MISS
    store.finish(key=claim_key, owner=owner, response=StoredResponse(status=201), ttl_ms=60_000)
    replay, _, _ = claim(store, tenant=lua_tenant, token=token, route="a")
    assert replay.outcome is Outcome.HIT
    elsewhere, _, _ = claim(store, tenant=lua_tenant, token=token, route="b")
    assert elsewhere == TokenRefusal("used")


def test_token_and_claim_keys_share_a_slot_on_a_cluster(cluster_client: RedisCluster) -> None:
    """On a Redis Cluster a script touching two slots fails with CROSSSLOT: the token key
    must follow the claim key's hash tag, sub-bucket included."""
    store = RedisIdempotencyStore(cluster_client)
    tenant = f"tok-cluster-{uuid.uuid4().hex}"
    tokens = new_tokens(tenant=tenant, principal="p", count=20)
    store_tokens(
        cluster_client, tenant=tenant, principal="p", tokens=tokens, ttl_seconds=60, buckets=4
    )
    tags = set()
    try:
        for token in tokens:
            claim_key = redis_key_for(tenant=tenant, scope="p|POST|r", key=token, buckets=4)
            use = token_use(
                tenant=tenant,
                principal="p",
                token=token,
                claim_key=claim_key,
                mark_ttl_seconds=60,
                buckets=4,
            )
            assert use.key.split("}")[0] == claim_key.split("}")[0]
            tags.add(claim_key.split("}")[0])
            result = store.claim(
                key=claim_key,
                fingerprints={1: FP},
                current_version=1,
                owner=new_owner_token(),
                lease_ms=10_000,
                token=use,
            )
            assert result.outcome is Outcome.MISS
        assert len(tags) > 1  # the tokens really spread over sub-buckets
        states = read_token_states(
            cluster_client, tenant=tenant, principal="p", tokens=tokens, buckets=4, secret=None
        )
        assert states == [TokenStatus.USED] * 20
    finally:
        for key in cluster_client.scan_iter(match=f"idem:{{t:{tenant}*"):
            cluster_client.delete(key)


def test_rotated_secret_still_verifies(settings: Any) -> None:
    old = sign_token(tenant="1", principal="p", token_id="D" * 22, secret="old-secret")
    with pytest.raises(InvalidToken):
        verify_token(old, tenant="1", principal="p")
    settings.SECRET_KEY_FALLBACKS = ["old-secret"]
    assert verify_token(old, tenant="1", principal="p") == "D" * 22


# --- counting round trips ---------------------------------------------------------------


class CountingRedis(redis.Redis):
    """Counts the round trips the test's own thread makes: one per command sent alone, one
    per pipeline ``execute`` (a pipeline sends all its commands at once). Other threads (the
    invalidation listener) are ignored."""

    sends = 0
    thread: int | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._count()
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._count()
            return execute(*args, **kwargs)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe

    @classmethod
    def _count(cls) -> None:
        if threading.get_ident() == cls.thread:
            cls.sends += 1

    @classmethod
    def reset(cls) -> None:
        cls.sends = 0
        cls.thread = threading.get_ident()


_counting: list[redis.Redis] = []


def counting_redis(tenant_key: str) -> redis.Redis:
    """REDIS_CLIENT_FOR_TENANT whose connections count round trips."""
    if not _counting:
        _counting.append(CountingRedis.from_url(REDIS_URL))
    return _counting[0]


def use_counting_client(settings: Any) -> type[CountingRedis]:
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.idempotency.test_tokens.counting_redis",
    }
    stores.reset()
    CountingRedis.reset()
    return CountingRedis
