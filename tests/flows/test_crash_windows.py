"""Crash windows (seed ch. 1, 4.3): Redis and the database disagree, the answer stays right.

A process killed between commit and Redis finish leaves an in-progress entry whose owner is
gone; one killed before commit leaves the same entry and nothing in the database. Both are
reproduced here exactly as they look in Redis and PostgreSQL, and the retry must replay (first
case) or execute once after the lease (second case).
"""

from __future__ import annotations

import threading

import pytest
import redis
from django.conf import settings
from django.db import connection

from idempotency.core.keys import ScopedKey
from idempotency.core.outcomes import Outcome
from idempotency.stores import nodes as stores
from idempotency.stores.redis_store import RedisIdempotencyStore
from ordering.models import Order
from tests.flows.test_idempotent_orders import post_order
from tests.support.waiting import DEADLINE_SECONDS, wait_until

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
    # given a claim held by a process that died before committing (lease 6 s, well over
    # the 2 s that create-order's "wait" policy holds a duplicate)
    store = RedisIdempotencyStore(redis.Redis.from_url(settings.REDIS_URL))
    scoped = api_principal_scope("crash-before-commit")
    store.claim(
        key=scoped.redis_key,
        fingerprints=fingerprints_of_order(menu),
        current_version=1,
        owner="dead-process",
        lease_ms=6000,
    )
    # when the client retries within the lease, then (after waiting) 409 with Retry-After,
    # nothing written
    early = post_order(api, menu, key="crash-before-commit")
    assert early.status_code == 409 and early.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert 1 <= int(early["Retry-After"]) <= 6 and Order.all_tenants.count() == 0
    # when it retries after the lease ran out, then it executes, once
    client = redis.Redis.from_url(settings.REDIS_URL)
    wait_until(lambda: not client.exists(scoped.redis_key), what="the dead claim's lease expired")
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


class InBackground:
    """``call()`` in a thread of its own (its own database connection), its answer kept."""

    def __init__(self, call):
        self._answer = {}

        def run():
            try:
                self._answer["value"] = call()
            finally:
                connection.close()

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def answer(self):
        self._thread.join(DEADLINE_SECONDS)
        return self._answer["value"]

    def answer_if_done(self):
        """The answer, or None while the call is still running."""
        return None if self._thread.is_alive() else self._answer.get("value")


class HeldService:
    """The view's service ``name``, held inside the first request (which has claimed its
    key by then) until the test releases it: ``entered`` tells that it got there."""

    def __init__(self, monkeypatch, name):
        from ordering.api import views

        real = getattr(views, name)
        self.entered, self.release = threading.Event(), threading.Event()

        def held(**kwargs):
            self.entered.set()
            assert self.release.wait(DEADLINE_SECONDS)
            return real(**kwargs)

        monkeypatch.setattr(views, name, held)

    def wait_entered(self):
        wait_until(self.entered.is_set, what="the first request inside the view")


def told_in_progress(monkeypatch) -> threading.Event:
    """Set once a Redis claim answers IN_PROGRESS (a duplicate met the running first)."""
    real = RedisIdempotencyStore.claim
    seen = threading.Event()

    def claim(self, **kwargs):
        result = real(self, **kwargs)
        if getattr(result, "outcome", None) is Outcome.IN_PROGRESS:
            seen.set()
        return result

    monkeypatch.setattr(RedisIdempotencyStore, "claim", claim)
    return seen


@pytest.mark.django_db(transaction=True)
def test_wait_policy_holds_the_duplicate_and_replays(api, menu, monkeypatch):
    # given a create-order request (policy "wait") held inside its view
    held = HeldService(monkeypatch, "place_order")
    in_progress = told_in_progress(monkeypatch)
    first = InBackground(lambda: post_order(api, menu, key="slow"))
    held.wait_entered()
    # when a duplicate arrives, and is told the first is still running
    dup = InBackground(lambda: post_order(api, menu, key="slow"))
    wait_until(in_progress.is_set, what="the duplicate waiting on the first")
    held.release.set()
    # then the duplicate waited and replays the first's answer
    first, dup = first.answer(), dup.answer()
    assert first.status_code == dup.status_code == 201
    assert dup["X-Idempotent-Result"] == "HIT" and dup.content == first.content
    assert Order.all_tenants.count() == 1


@pytest.mark.django_db(transaction=True)
def test_reject_policy_answers_409_with_retry_after(api, menu, monkeypatch):
    # given a pay request (policy "reject") held inside its view
    order_id = post_order(api, menu, key="o").json()["id"]
    held = HeldService(monkeypatch, "pay_order")
    pay = lambda: api.post(f"/api/v1/orders/{order_id}/pay/")  # noqa: E731
    first = InBackground(pay)
    held.wait_entered()
    # when a duplicate arrives while it runs, then it is told to retry later
    dup = pay()
    held.release.set()
    assert first.answer().status_code == 200
    assert dup.status_code == 409 and dup.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert int(dup["Retry-After"]) >= 1
    assert Order.all_tenants.get(pk=order_id).payments.count() == 1
