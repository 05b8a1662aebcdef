"""Which way the engine answers, and what it keeps: where a replay came from, a mismatch never
running the view, a 5xx keeping nothing and releasing its key at once.

Written against the mutants of ``idempotency/core/engine.py`` that survived the engine's
contract suite (docs/mutation-testing.md): each asserts what a client or a reviewer can see
(the status, the audit's source, the number of executions, what is stored).
"""

from __future__ import annotations

import threading

import pytest
import redis
from django.conf import settings

from config.api_errors import ApiError
from idempotency.models import IdempotencyRecord
from idempotency.stores import nodes as stores
from ordering.models import Dish, Order
from tests.flows.test_crash_windows import InBackground
from tests.flows.test_idempotent_orders import audits, post_order
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = pytest.mark.django_db


class CountedService:
    """``views.place_order`` counting its executions; with ``hold_first``, the first one
    waits inside (its key claimed, its transaction open) until ``release`` is set."""

    def __init__(self, monkeypatch, *, hold_first: bool = False) -> None:
        from ordering.api import views

        real = views.place_order
        self.runs = 0
        self.entered, self.release = threading.Event(), threading.Event()
        if not hold_first:
            self.release.set()

        def counted(**kwargs):
            self.runs += 1
            if self.runs == 1:
                self.entered.set()
                assert self.release.wait(DEADLINE_SECONDS)
            return real(**kwargs)

        monkeypatch.setattr(views, "place_order", counted)


def test_each_replay_says_where_it_came_from_and_a_mismatch_never_runs(api, menu, monkeypatch):
    service = CountedService(monkeypatch)
    first = post_order(api, menu, key="k")
    stores.local_cache().clear()  # as on another worker
    from_redis = post_order(api, menu, key="k")
    from_local = post_order(api, menu, key="k")  # the Redis replay was remembered here
    other_payload = post_order(api, menu, key="k", quantity=3)
    assert [r["X-Idempotent-Result"] for r in (first, from_redis, from_local)] == [
        "MISS",
        "HIT",
        "HIT",
    ]
    assert other_payload.status_code == 422
    assert other_payload.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert [a.source for a in audits(outcome="HIT")] == ["redis", "local"]
    assert [a.source for a in audits(outcome="REUSED")] == ["redis"]
    assert service.runs == 1 and Order.all_tenants.count() == 1


@pytest.mark.django_db(transaction=True)
def test_another_payload_while_the_first_runs_is_refused_at_once(api, menu, monkeypatch):
    # given a first request held inside its view
    service = CountedService(monkeypatch, hold_first=True)
    first = InBackground(lambda: post_order(api, menu, key="busy"))
    wait_until(service.entered.is_set, what="the first request inside the view")
    # when the same key comes with another payload, then it is refused (not "in progress")
    # without running the view
    other = InBackground(lambda: post_order(api, menu, key="busy", quantity=3))
    other_answer = wait_until(
        lambda: other.answer_if_done() or service.runs > 1, what="the other payload answered"
    )
    service.release.set()
    assert first.answer().status_code == 201
    assert service.runs == 1, "the other payload ran the view"
    assert other_answer.status_code == 422
    assert other_answer.json()["code"] == "IDEMPOTENCY_KEY_REUSED"


@pytest.mark.parametrize("failure", ["answers 503", "raises"])
def test_a_5xx_after_writing_keeps_nothing_and_frees_the_key_at_once(
    api, menu, tenant, monkeypatch, engine_mode, failure
):
    from ordering.api import views

    real = views.place_order
    calls: list[int] = []

    def wrote_then_failed(**kwargs):
        order = real(**kwargs)
        if not calls:
            calls.append(1)
            if failure == "raises":
                raise RuntimeError("the process lost its database")
            raise ApiError(status_code=503, code="UPSTREAM_UNAVAILABLE", detail="try again")
        return order

    monkeypatch.setattr(views, "place_order", wrote_then_failed)
    api.raise_request_exception = False
    failed = post_order(api, menu, key="retry-me")
    assert failed.status_code == (503 if failure == "answers 503" else 500)
    # nothing of it was kept: no order, no stock taken, no record, no Redis entry left behind
    assert Order.all_tenants.count() == 0 and IdempotencyRecord.objects.count() == 0
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 50
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert not list(client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
    # and the retry runs at once
    retried = post_order(api, menu, key="retry-me")
    assert retried.status_code == 201 and retried["X-Idempotent-Result"] == "MISS"
    assert Order.all_tenants.count() == 1


def test_a_refusal_after_writing_is_recorded_in_the_database(api, menu, engine_mode):
    # given an order whose first line takes stock and whose second cannot (the service
    # refuses after a write, which dooms the business transaction)
    body = {
        "items": [
            {"dish_id": menu["pizza"].pk, "quantity": 1},
            {"dish_id": menu["pasta"].pk, "quantity": 99},
        ],
        "payment_method": "card",
    }
    first = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="doomed")
    assert first.status_code == 409 and first.json()["code"] == "INSUFFICIENT_STOCK"
    # then its writes were rolled back, and the refusal itself is kept where every process
    # finds it: the database record (Redis and this process's cache may lose it)
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 50
    [record] = IdempotencyRecord.objects.all()
    assert record.response_status == 409 and bytes(record.response_body) == first.content
    assert Order.all_tenants.count() == 0


@pytest.mark.django_db(transaction=True)
def test_database_only_a_duplicate_racing_into_the_view_replays_the_winner(
    api, menu, settings, monkeypatch
):
    """Without Redis, a duplicate that passed the record check while the first was still
    running waits in the database (on the order's own unique key, or on a claim taken before
    the view), then answers with the first's result instead of a second order or a 500."""
    from django.db import connection as main_connection

    from ordering.api import views

    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
    }
    stores.reset()
    real = views.place_order
    wrote, release = threading.Event(), threading.Event()

    def first_holds_after_writing(**kwargs):
        order = real(**kwargs)
        if not wrote.is_set():
            wrote.set()
            assert release.wait(DEADLINE_SECONDS)
        return order

    monkeypatch.setattr(views, "place_order", first_holds_after_writing)
    api.raise_request_exception = False  # a crash is an answer (500) here
    first = InBackground(lambda: post_order(api, menu, key="race"))
    wait_until(wrote.is_set, what="the first order written, not committed")
    second = InBackground(lambda: post_order(api, menu, key="race"))

    def a_backend_waits_on_a_lock() -> bool:
        with main_connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return cursor.fetchone()[0] > 0

    wait_until(a_backend_waits_on_a_lock, what="the duplicate waiting in the database")
    release.set()
    first, second = first.answer(), second.answer()
    assert first.status_code == second.status_code == 201
    assert second["X-Idempotent-Result"] == "HIT" and second.content == first.content
    assert Order.all_tenants.count() == 1
    stores.reset()
