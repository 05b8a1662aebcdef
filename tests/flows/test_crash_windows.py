"""Crash windows (seed ch. 1, 4.3): Redis and the database disagree, the answer stays right.

A process killed between commit and Redis finish leaves an in-progress entry whose owner is
gone; one killed before commit leaves the same entry and nothing in the database. Both are
reproduced here exactly as they look in Redis and PostgreSQL, and the retry must replay (first
case) or execute once after the lease (second case).
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings
from django.db import connection

from idempotency.core.keys import ScopedKey
from idempotency.stores import nodes as stores
from idempotency.stores.redis_store import RedisIdempotencyStore
from ordering.models import Order
from tests.flows.test_idempotent_orders import post_order

pytestmark = pytest.mark.django_db


def redis_keys(tenant) -> list[bytes]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    return list(client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))


def test_killed_between_commit_and_finish_replays_from_database(api, menu, tenant, monkeypatch):
    # given a first request that committed but died before its Redis finish
    monkeypatch.setattr(RedisIdempotencyStore, "finish", lambda self, **kw: True)
    first = post_order(api, menu, key="crash-after-commit")
    monkeypatch.undo()
    assert first.status_code == 201 and Order.all_tenants.count() == 1
    client = redis.Redis.from_url(settings.REDIS_URL)
    [key] = redis_keys(tenant)
    assert client.hget(key, "st") == b"p"  # still "in progress", owner dead
    # when the client retries during the lease, then it gets the committed result
    during = post_order(api, menu, key="crash-after-commit")
    assert during.status_code == 201 and during["X-Idempotent-Result"] == "HIT"
    assert during.content == first.content
    # when the lease expired (Redis forgot the key) and the client retries again, on a worker
    # whose local cache does not have the result
    client.delete(key)
    stores.local_cache().clear()
    after = post_order(api, menu, key="crash-after-commit")
    assert after.status_code == 201 and after.content == first.content
    assert after["X-Idempotent-Result"] == "HIT"
    # then nothing ran twice, and Redis holds the result again
    assert Order.all_tenants.count() == 1
    assert client.hget(key, "st") == b"d"


def test_redis_flushed_after_finish_replays_from_database(api, menu, tenant):
    first = post_order(api, menu, key="evicted")
    redis.Redis.from_url(settings.REDIS_URL).delete(*redis_keys(tenant))
    stores.local_cache().clear()
    again = post_order(api, menu, key="evicted")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert Order.all_tenants.count() == 1


def test_killed_before_commit_executes_once_after_lease(api, menu, tenant, api_principal_scope):
    # given a claim held by a process that died before committing (lease 3.5 s, longer than
    # the 2 s that create-order's "wait" policy holds a duplicate)
    store = RedisIdempotencyStore(redis.Redis.from_url(settings.REDIS_URL))
    scoped = api_principal_scope("crash-before-commit")
    store.claim(
        key=scoped.redis_key,
        fingerprints=fingerprints_of_order(menu),
        current_version=1,
        owner="dead-process",
        lease_ms=3500,
    )
    # when the client retries within the lease, then (after waiting) 409 with Retry-After,
    # nothing written
    early = post_order(api, menu, key="crash-before-commit")
    assert early.status_code == 409 and early.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert int(early["Retry-After"]) in (1, 2) and Order.all_tenants.count() == 0
    # when it retries after the lease ran out, then it executes, once
    remaining_ms = redis.Redis.from_url(settings.REDIS_URL).pttl(scoped.redis_key)
    time.sleep(max(remaining_ms, 0) / 1000 + 0.05)
    late = post_order(api, menu, key="crash-before-commit")
    assert late.status_code == 201 and late["X-Idempotent-Result"] == "MISS"
    assert Order.all_tenants.count() == 1


def fingerprints_of_order(menu, quantity=2) -> dict[int, str]:
    from idempotency.core.fingerprint import all_fingerprints
    from idempotency.web.http import business_payload as _payload

    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": quantity}],
        "payment_method": "card",
    }
    return all_fingerprints(
        _payload(body, ("items", "payment_method", "coupon_code", "note"), {}), None
    )


@pytest.fixture
def api_principal_scope(api, tenant):
    """The scope of ``api``'s requests: its session's diner (``diner-1``)."""

    def make(key: str) -> ScopedKey:
        return ScopedKey(
            tenant=str(tenant.pk),
            principal="diner:diner-1",
            method="POST",
            route="api/v1/orders/",
            key=key,
        )

    return make


def run_with_duplicate(first_call, duplicate_call, delay=0.2):
    """Start ``first_call`` in a thread, send ``duplicate_call`` while it runs."""
    results = {}

    def first():
        results["first"] = first_call()
        connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(delay)
    results["dup"] = duplicate_call()
    thread.join(10)
    return results["first"], results["dup"]


def slowed(monkeypatch, name, seconds=0.6):
    from ordering.api import views

    real = getattr(views, name)

    def slow(**kwargs):
        time.sleep(seconds)
        return real(**kwargs)

    monkeypatch.setattr(views, name, slow)


@pytest.mark.django_db(transaction=True)
def test_wait_policy_holds_the_duplicate_and_replays(api, menu, monkeypatch):
    # given a create-order request (policy "wait") that takes 0.6 s
    slowed(monkeypatch, "place_order")
    # when a duplicate arrives while it runs
    first, dup = run_with_duplicate(
        lambda: post_order(api, menu, key="slow"), lambda: post_order(api, menu, key="slow")
    )
    # then the duplicate waited and replays the first's answer
    assert first.status_code == dup.status_code == 201
    assert dup["X-Idempotent-Result"] == "HIT" and dup.content == first.content
    assert Order.all_tenants.count() == 1


@pytest.mark.django_db(transaction=True)
def test_reject_policy_answers_409_with_retry_after(api, menu, monkeypatch):
    # given a pay request (policy "reject") that takes 0.6 s
    order_id = post_order(api, menu, key="o").json()["id"]
    slowed(monkeypatch, "pay_order")
    pay = lambda: api.post(f"/api/v1/orders/{order_id}/pay/")  # noqa: E731
    first, dup = run_with_duplicate(pay, pay)
    assert first.status_code == 200
    assert dup.status_code == 409 and dup.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert int(dup["Retry-After"]) >= 1
    assert Order.all_tenants.get(pk=order_id).payments.count() == 1
