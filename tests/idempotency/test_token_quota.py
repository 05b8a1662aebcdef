"""The quota of outstanding pre-issued tokens per tenant (``idempotency/core/tokens.py``).

The reproduced attack: one API key minted 600,000 tokens in 10 s (about 182 bytes of Redis
each, kept 24 h). Now a tenant has at most ``TOKEN_QUOTA`` tokens outstanding, and the count
follows tokens as they are used or expire.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
import redis
from openapi_schema_validator import OAS30ReadValidator
from rest_framework.test import APIClient

from idempotency.core import tokens
from idempotency.core.tokens import (
    QUOTA_BUCKET_MS,
    new_tokens,
    principal_quota_key,
    quota_key,
    store_tokens,
)
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.conftest import api_for
from tests.idempotency.test_tokens import REDIS_URL, client, no_rate_limit
from tests.support.auth import with_auth

__all__ = ["client", "no_rate_limit"]  # fixtures shared with the token tests

TOKENS = "/api/v1/idempotency-tokens/"


# The quota is tested on its own (the write limiter has its own tests), on the suite's Redis.
pytestmark = pytest.mark.usefixtures("no_rate_limit")


def issue(api: Any, count: int) -> Any:
    return api.post(TOKENS, {"count": count}, format="json")


def outstanding(client: redis.Redis, tenant: Any, token: str) -> int:
    ledger = client.hgetall(quota_key(tenant=str(tenant.pk), token=token))
    return sum(int(count) for count in ledger.values())


@pytest.fixture
def only_the_tenant_s_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    """A principal's share is the whole quota: one principal tests the tenant's bound."""
    monkeypatch.setattr(tokens, "PRINCIPAL_SHARE", 1)


@pytest.mark.django_db
@pytest.mark.usefixtures("only_the_tenant_s_quota")
def test_one_key_cannot_mint_tokens_past_the_default_quota(settings: Any, api: Any) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 2500}
    assert [issue(api, n).status_code for n in (1000, 1000, 500)] == [201, 201, 201]

    refused = issue(api, 1)

    assert refused.status_code == 429
    assert refused.json()["code"] == "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED"
    assert refused.json()["limit"] == 2500
    retry_after = int(refused["Retry-After"])
    assert 24 * 3600 - 5 <= retry_after <= 24 * 3600 + QUOTA_BUCKET_MS // 1000


@pytest.mark.django_db
@pytest.mark.usefixtures("only_the_tenant_s_quota")
def test_a_refused_batch_stores_nothing(
    settings: Any, api: Any, tenant: Any, client: redis.Redis
) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 1500}
    first = issue(api, 1000).json()["tokens"]
    before = client.dbsize()

    assert issue(api, 600).status_code == 429

    assert client.dbsize() == before
    assert outstanding(client, tenant, first[0]) == 1000
    assert issue(api, 500).status_code == 201  # exactly up to the quota


@pytest.mark.django_db
@pytest.mark.usefixtures("only_the_tenant_s_quota")
def test_a_tenant_of_its_own_quota(settings: Any, api: Any, tenant: Any) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 10}
    tenant.token_quota = 1200
    tenant.save(update_fields=["token_quota"])

    assert issue(api, 1000).status_code == 201
    assert issue(api, 200).status_code == 201
    assert issue(api, 1).status_code == 429


@pytest.mark.django_db
def test_a_used_token_is_no_longer_outstanding(
    settings: Any, api: Any, menu: Any, tenant: Any, client: redis.Redis
) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 3}
    tokens = issue(api, 3).json()["tokens"]
    assert issue(api, 1).status_code == 429
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}

    placed = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=tokens[0])
    replayed = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=tokens[0])

    assert placed.status_code == 201 and replayed["X-Idempotent-Result"] == "HIT"
    assert outstanding(client, tenant, tokens[0]) == 2  # the replay took nothing off again
    assert issue(api, 1).status_code == 201
    assert issue(api, 1).status_code == 429


def test_expired_tokens_leave_the_count(client: redis.Redis) -> None:
    tenant, width = f"quota-{uuid.uuid4().hex}", 200  # 200 ms buckets: a short test

    def store(tokens: list[str]) -> Any:
        return store_tokens(
            client,
            tenant=tenant,
            principal="p",
            tokens=tokens,
            ttl_seconds=1,
            limit=3,
            bucket_ms=width,
        )

    first = new_tokens(tenant=tenant, principal="p", count=3)
    assert store(first).stored
    late = new_tokens(tenant=tenant, principal="p", count=1)
    assert not store(late).stored

    # the first tokens expire, and then the ledger bucket they were counted in ends
    ledger = quota_key(tenant=tenant, token=first[0])
    (bucket,) = (int(b) for b in client.hkeys(ledger))
    while client.keys(f"idem:{{t:{tenant}}}:tok:*"):
        time.sleep(0.05)
    time.sleep(max(0.0, (bucket + 1) * width / 1000 - time.time()) + 0.05)

    again = store(late)
    assert again.stored and again.outstanding == 1
    assert [int(b) for b in client.hkeys(ledger)] != [bucket]  # the old bucket was dropped


def issued_at_once(tenant: str, **limits: int) -> tuple[list[list[str]], list[Any]]:
    """Twelve batches of 100 tokens of principal ``p``, stored by twelve threads released
    together, each on a connection of its own; the batches and what each store answered."""
    batches = [new_tokens(tenant=tenant, principal="p", count=100) for _ in range(12)]
    barrier = threading.Barrier(len(batches))
    results: list[Any] = []

    def issue_batch(tokens: list[str]) -> None:
        own = redis.Redis.from_url(REDIS_URL)
        try:
            barrier.wait()
            results.append(
                store_tokens(
                    own, tenant=tenant, principal="p", tokens=tokens, ttl_seconds=60, **limits
                )
            )
        finally:
            own.close()

    threads = [threading.Thread(target=issue_batch, args=(b,)) for b in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return batches, results


def test_concurrent_issuers_never_pass_the_quota(client: redis.Redis) -> None:
    tenant = f"quota-race-{uuid.uuid4().hex}"
    batches, results = issued_at_once(tenant, limit=500)
    stored = [r.stored for r in results]

    assert sorted(stored) == [False] * 7 + [True] * 5
    ledger = client.hgetall(quota_key(tenant=tenant, token=batches[0][0]))
    assert sum(int(v) for v in ledger.values()) == 500
    keys = client.keys(f"idem:{{t:{tenant}}}:tok:*")
    assert len(keys) == 500


@pytest.mark.django_db
def test_a_hot_tenant_issues_each_batch_into_one_sub_bucket_with_its_share(
    settings: Any, api: Any, menu: Any, tenant: Any, client: redis.Redis
) -> None:
    buckets = 4
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "TOKEN_QUOTA": 400,
        "HOT_TENANT_BUCKETS": {str(tenant.pk): buckets},
    }
    tokens = issue(api, 100).json()["tokens"]
    ledgers = {quota_key(tenant=str(tenant.pk), token=t, buckets=buckets) for t in tokens}
    assert len(ledgers) == 1  # one hash tag: one Lua call, one cluster slot
    (ledger,) = ledgers
    assert sum(int(v) for v in client.hgetall(ledger).values()) == 100

    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}
    placed = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=tokens[0])

    assert placed.status_code == 201
    assert sum(int(v) for v in client.hgetall(ledger).values()) == 99


# --- a principal's share of the quota ----------------------------------------------------


@pytest.mark.django_db
def test_one_guest_cannot_use_up_the_tenant_s_quota(api: Any, tenant: Any) -> None:
    """The probe: one guest session issued 100 batches of 1,000 and every other diner and the
    merchant got 429 for 24 h. With the defaults, it holds at most 2,000."""
    assert [issue(api, 1000).status_code for _ in range(2)] == [201, 201]

    refused = issue(api, 1)

    assert refused.status_code == 429
    body = refused.json()
    assert (body["code"], body["limit"], body["scope"]) == (
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED",
        2000,
        "principal",
    )
    assert body["detail"].startswith("You may have at most 2000")
    assert 24 * 3600 - 5 <= int(refused["Retry-After"]) <= 24 * 3600 + QUOTA_BUCKET_MS // 1000
    # and everyone else still gets tokens
    assert issue(api_for(tenant, diner="diner-2"), 1000).status_code == 201
    assert issue(api_for(tenant, kind=ApiClient.Kind.MERCHANT), 1000).status_code == 201


@pytest.mark.django_db
def test_the_tenant_s_quota_still_binds_principals_together(settings: Any, tenant: Any) -> None:
    # each principal may hold max(1/50 of 1,500, one batch of 1,000) = 1,000
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 1500}
    assert issue(api_for(tenant, diner="d1"), 1000).status_code == 201

    refused = issue(api_for(tenant, diner="d2"), 600)

    assert refused.status_code == 429
    assert (refused.json()["limit"], refused.json()["scope"]) == (1500, "tenant")


@pytest.mark.django_db
def test_a_used_token_gives_its_place_back_to_its_principal(
    settings: Any, api: Any, menu: Any, tenant: Any, client: redis.Redis
) -> None:
    # each principal may hold max(1/50 of 150, one batch of 3) = 3
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 150, "TOKEN_MAX_BATCH": 3}
    tokens = issue(api, 3).json()["tokens"]
    assert issue(api, 1).status_code == 429
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}

    placed = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=tokens[0])

    assert placed.status_code == 201
    principal = placed.wsgi_request.user.principal_id
    ledger = principal_quota_key(tenant=str(tenant.pk), token=tokens[0], principal=principal)
    assert sum(int(v) for v in client.hgetall(ledger).values()) == 2
    assert issue(api, 1).status_code == 201
    assert issue(api, 1).status_code == 429


def test_concurrent_issuers_never_pass_the_principal_s_share(client: redis.Redis) -> None:
    # given twelve batches of 100 for one principal, under a tenant quota they all fit in
    tenant = f"principal-race-{uuid.uuid4().hex}"
    batches, results = issued_at_once(tenant, limit=10_000, principal_limit=500)

    # then exactly five were stored, the others refused by the principal's share
    assert sorted(r.stored for r in results) == [False] * 7 + [True] * 5
    assert {r.refused_by for r in results if not r.stored} == {"principal"}
    mine = client.hgetall(principal_quota_key(tenant=tenant, token=batches[0][0], principal="p"))
    theirs = client.hgetall(quota_key(tenant=tenant, token=batches[0][0]))
    assert sum(int(v) for v in mine.values()) == sum(int(v) for v in theirs.values()) == 500
    assert len(client.keys(f"idem:{{t:{tenant}}}:tok:*")) == 500


# --- guests' share of the quota -----------------------------------------------------------


def guest(tenant: Any) -> Any:
    """A guest session, opened with the tenant's public publishable key as its app does."""
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    opened = with_auth(f"Api-Key {publishable}").post("/api/v1/diner-sessions/", format="json")
    assert opened.status_code == 201
    return with_auth(f"Bearer {opened.json()['token']}")


@pytest.mark.django_db
def test_guests_fill_their_share_of_the_quota_and_the_merchant_still_gets_tokens(
    settings: Any, tenant: Any
) -> None:
    """The probe: two guest sessions issued 1,000 and 998 tokens of a quota of 2,000, and the
    restaurant's own key was refused 429 until they expired. Guests now stop at 0.8 of it."""
    settings.API_GUEST_CEILING_SHARE = 0.8
    tenant.token_quota = 2000
    tenant.save(update_fields=["token_quota"])
    guests = [guest(tenant), guest(tenant)]
    assert issue(guests[0], 1000).status_code == 201
    assert issue(guests[1], 600).status_code == 201

    refused = issue(guests[1], 1)

    assert refused.status_code == 429
    body = refused.json()
    assert (body["code"], body["limit"], body["scope"]) == (
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED",
        1600,
        "tenant_share",
    )
    assert 24 * 3600 - 5 <= int(refused["Retry-After"]) <= 24 * 3600 + QUOTA_BUCKET_MS // 1000
    assert issue(guest(tenant), 1).status_code == 429  # a new guest session is no way round
    # the merchant's key and a diner it signed in go on to the full quota
    assert issue(api_for(tenant, kind=ApiClient.Kind.MERCHANT), 300).status_code == 201
    assert issue(api_for(tenant, diner="signed-in"), 100).status_code == 201
    over = issue(api_for(tenant, kind=ApiClient.Kind.MERCHANT), 1)
    assert (over.status_code, over.json()["scope"], over.json()["limit"]) == (429, "tenant", 2000)


def quota_refusals(settings: Any, tenant: Any) -> list[Any]:
    """One refusal of each scope, in this order: a guest past its own share, a guest past the
    guests' share of the quota (0.8 of 2,000), the merchant past the tenant's quota."""
    settings.API_GUEST_CEILING_SHARE = 0.8
    tenant.token_quota = 2000
    tenant.save(update_fields=["token_quota"])
    a_guest, merchant = guest(tenant), api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    assert issue(a_guest, 1000).status_code == 201  # a principal's share: one batch at least

    refusals = [issue(a_guest, 1)]
    assert issue(merchant, 600).status_code == 201
    refusals.append(issue(guest(tenant), 1))  # past the guests' share of the quota, 1,600
    assert issue(api_for(tenant, diner="signed-in"), 400).status_code == 201
    refusals.append(issue(merchant, 1))  # past the tenant's quota, 2,000
    assert [(r.status_code, r.json()["scope"]) for r in refusals] == [
        (429, "principal"),
        (429, "tenant_share"),
        (429, "tenant"),
    ]
    return refusals


def served_schema() -> dict[str, Any]:
    return APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()


@pytest.mark.django_db
def test_each_quota_refusal_is_an_error_the_api_schema_declares(settings: Any, tenant: Any) -> None:
    """A guest refused by the guests' share gets ``"scope": "tenant_share"``: a client
    generated from the schema must be able to read it, as the principal's and the tenant's."""
    schema = served_schema()
    problem = OAS30ReadValidator({**schema, "$ref": "#/components/schemas/Problem"})

    for refused in quota_refusals(settings, tenant):
        problem.validate(refused.json())


@pytest.mark.django_db
def test_the_schema_says_when_issuing_tokens_is_refused_429(settings: Any, tenant: Any) -> None:
    """The operation's description named the tenant's quota alone, while a guest is refused
    long before it (its own share, the guests' share) and any caller by the write rate limit:
    an app developer reading it looked for the wrong cause of the 429."""
    operation = served_schema()["paths"][TOKENS]["post"]
    described = f"{operation['description']} {operation['responses']['429']['description']}"

    for refused in quota_refusals(settings, tenant):
        assert refused.json()["code"] in described
        assert f"`{refused.json()['scope']}`" in described
    assert "RATE_LIMITED" in described


def test_concurrent_guests_never_pass_their_share_and_the_merchant_still_gets_tokens(
    client: redis.Redis,
) -> None:
    # given 24 guest batches of 100 (share 500) and 4 merchant ones, all at once, under a quota
    # of 1,000 that every guest batch alone would fit in
    tenant = f"share-race-{uuid.uuid4().hex}"
    batches = [
        (f"g{i}", new_tokens(tenant=tenant, principal=f"g{i}", count=100)) for i in range(24)
    ]
    batches += [("m", new_tokens(tenant=tenant, principal="m", count=100)) for _ in range(4)]
    barrier = threading.Barrier(len(batches))
    results: list[tuple[str, Any]] = []

    def issue_batch(principal: str, batch: list[str]) -> None:
        own = redis.Redis.from_url(REDIS_URL)
        try:
            barrier.wait()
            share_limit = None if principal == "m" else 500
            result = store_tokens(
                own,
                tenant=tenant,
                principal=principal,
                tokens=batch,
                ttl_seconds=60,
                limit=1000,
                share_limit=share_limit,
            )
            results.append((principal, result))
        finally:
            own.close()

    threads = [threading.Thread(target=issue_batch, args=batch) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # then the guests stored at most five, refused by their share, and the merchant all four
    assert len(results) == len(batches)
    guests = [r for p, r in results if p != "m"]
    assert 1 <= sum(r.stored for r in guests) <= 5
    assert {r.refused_by for r in guests if not r.stored} == {"tenant_share"}
    assert all(r.stored for p, r in results if p == "m")
    stored = 100 * sum(r.stored for _, r in results)
    ledger = client.hgetall(quota_key(tenant=tenant, token=batches[0][1][0]))
    assert sum(int(v) for v in ledger.values()) == stored <= 900
    assert len(client.keys(f"idem:{{t:{tenant}}}:tok:*")) == stored
