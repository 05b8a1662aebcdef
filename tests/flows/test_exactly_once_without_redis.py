"""Exactly one *execution* per key when Redis does not decide (issue 14, items 1 and 2).

64 identical requests at once against a live server — 4 sync workers, and one 16-thread
gthread worker — for a diner's create and pay and a merchant's accept, in three situations:

- database-only by configuration (no Redis at all);
- the Redis node SIGKILLed mid-storm, while the first request runs its view under a Redis claim;
- the node's circuit breaker open (Redis alive but slow: every worker's breaker tripped first).

Counted by the engine's ``VIEW_EXECUTED_HOOK`` (``tests/support/view_executions.py``: a line
per execution, appended to a file by whichever process ran the view), not by rows — the
record's unique index keeps one row even when duplicates ran the view and were rolled back.
Each view is held 0.5 s after it starts, so duplicates really arrive while it runs.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from ordering.models import Dish, Order, OrderStatus, OrderTransition, Payment
from tests.flows.conftest import DATABASE_ONLY_ENV, STOCK, Shop
from tests.flows.test_storm import (
    QUANTITY,
    Call,
    executed_once,
    fire,
    place_order_call,
    stock_of,
)
from tests.hardening.conftest import ORDER_DINER, make_order
from tests.support.live_server import LiveServer, live_gunicorn
from tests.support.redis_nodes import RedisNode
from tests.support.slow_proxy import SlowProxy
from tests.support.view_executions import executions, server_env
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DUPLICATES = 64
HOLD_SECONDS = 0.5
ORDERS = "/api/v1/orders/"
KINDS: dict[str, dict] = {
    "sync-4": {"workers": 4},
    "gthread-16": {"workers": 1, "extra_args": ("--worker-class", "gthread", "--threads", "16")},
}
OPERATIONS = ("create", "pay", "accept")
# A Redis the test owns (never the suite's), the broker kept off it (Celery tasks stay in the
# worker's memory), and the database claim held under Redis claims too: a duplicate that falls
# back to the database while Redis dies mid-run waits for that run (ADR 0005).
OWN_REDIS_ENV: dict[str, str | None] = {
    **DATABASE_ONLY_ENV,
    "CELERY_BROKER_URL": "memory://",
    "IDEMPOTENCY_DATABASE_CLAIM_UNDER_REDIS": "1",
}
# Calls slower than 20 ms trip the breaker after 3 of them, and it stays open for the module.
SLOW_REDIS_SECONDS = 0.05
OPEN_BREAKER = {"p99_threshold_ms": 20, "min_calls": 3, "open_seconds": 600}


@dataclass(frozen=True)
class CountedServer:
    """A live server that records each view execution into ``log``."""

    server: LiveServer
    log: Path

    def runs(self, key: str) -> int:
        return len(executions(self.log, key=key))


@contextmanager
def counted_server(
    kind: str, *, env: dict[str, str | None], log_dir: Path
) -> Iterator[CountedServer]:
    log = log_dir / "executions.log"
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=log_dir,
        env={**env, **server_env(log, hold_seconds=HOLD_SECONDS)},
        **KINDS[kind],
    ) as server:
        yield CountedServer(server, log)


@dataclass(frozen=True)
class Operation:
    """One operation's storm call, its status, and the check that it happened once."""

    call: Call
    status: int
    happened_once: Callable[[], None]


def operation(name: str, shop: Shop, key: str) -> Operation:
    if name == "create":

        def one_order() -> None:
            assert Order.objects.for_tenant(shop.tenant).count() == 1
            assert stock_of(shop) == STOCK - QUANTITY

        return Operation(place_order_call(shop, key), 201, one_order)
    status = OrderStatus.CREATED if name == "pay" else OrderStatus.PAID
    order = make_order(shop.tenant, shop.dish, status)
    if name == "pay":
        headers = {**shop.headers(diner=ORDER_DINER), "Idempotency-Key": key}

        def one_payment() -> None:
            assert Payment.all_tenants.filter(order=order).count() == 1
            assert Order.all_tenants.get(pk=order.pk).status == OrderStatus.PAYING

        return Operation(Call(f"{ORDERS}{order.pk}/pay/", headers), 200, one_payment)
    headers = {"Authorization": f"Api-Key {shop.backend_key}", "Idempotency-Key": key}

    def one_move() -> None:
        moves = OrderTransition.all_tenants.filter(order=order, to_status=OrderStatus.ACCEPTED)
        assert moves.count() == 1
        assert Order.all_tenants.get(pk=order.pk).status == OrderStatus.ACCEPTED

    call = Call(f"{ORDERS}{order.pk}/transition/", headers, {"to": OrderStatus.ACCEPTED})
    return Operation(call, 200, one_move)


def assert_executed_once(
    counted: CountedServer,
    op: Operation,
    key: str,
    responses: list[httpx.Response],
    *,
    database_claimed: bool = True,
) -> Counter[str]:
    """One view execution, one MISS, every duplicate a byte-equal replay or a 409 to retry,
    and the business effect once. When the database claim decided (``database_claimed``),
    pay and accept (the reject policy) refused some duplicates that came while the view ran."""
    _, outcomes = executed_once(responses, status=op.status)
    assert outcomes.total() == DUPLICATES
    assert counted.runs(key) == 1, (executions(counted.log, key=key), outcomes)
    op.happened_once()
    if database_claimed and op.call.path != ORDERS:
        assert outcomes["IN_PROGRESS"] >= 1, outcomes
    return outcomes


# --- database-only ------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(KINDS))
def database_only_server(
    request: pytest.FixtureRequest, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CountedServer]:
    with counted_server(
        request.param, env=DATABASE_ONLY_ENV, log_dir=tmp_path_factory.mktemp("database-only")
    ) as counted:
        yield counted


@pytest.mark.parametrize("name", OPERATIONS)
def test_database_only_storm_runs_the_view_once(
    database_only_server: CountedServer, shop: Shop, name: str
):
    # given no Redis at all, and an operation ready to run
    key = f"db-only-{name}-{uuid.uuid4()}"
    op = operation(name, shop, key)
    # when 64 copies arrive at once
    responses = fire(database_only_server.server, [op.call] * DUPLICATES)
    # then its view ran once, and the duplicates replayed it or (reject) were told to retry
    assert_executed_once(database_only_server, op, key, responses)


def test_database_only_storm_of_a_refused_order_runs_the_view_once(
    database_only_server: CountedServer, shop: Shop
):
    """A refusal raised by a service after the transaction began dooms it: its writes roll
    back and the refusal is recorded. The duplicates waiting for the claim must get that
    refusal, not a run of their own in between."""
    # given an order for more than the stock
    Dish.all_tenants.filter(pk=shop.dish.pk).update(stock=5)
    key = f"db-only-refused-{uuid.uuid4()}"
    body = {"items": [{"dish_id": shop.dish.pk, "quantity": 10}], "payment_method": "card"}
    call = Call(ORDERS, {**shop.headers(), "Idempotency-Key": key}, body)
    # when 64 copies arrive at once
    responses = fire(database_only_server.server, [call] * DUPLICATES)
    # then the view ran once, and every copy got its refusal (replayed, or told to retry)
    _, outcomes = executed_once(responses, status=409)
    assert outcomes.total() == DUPLICATES
    assert database_only_server.runs(key) == 1, outcomes
    assert {
        r.json()["code"] for r in responses if r.headers["X-Idempotent-Result"] != "IN_PROGRESS"
    } == {"INSUFFICIENT_STOCK"}
    assert stock_of(shop) == 5 and not Order.objects.for_tenant(shop.tenant).exists()


def test_database_only_answers_a_running_duplicate_409_in_progress(
    database_only_server: CountedServer, shop: Shop
):
    # given a pay request running its view (held 0.5 s) on a database-only server
    key = f"in-progress-{uuid.uuid4()}"
    op = operation("pay", shop, key)
    first: list[httpx.Response] = []
    runner = threading.Thread(
        target=lambda: first.extend(fire(database_only_server.server, [op.call]))
    )
    runner.start()
    wait_until(lambda: database_only_server.runs(key) == 1, what="the first run to start")
    # when the same request arrives again while it runs
    [duplicate] = fire(database_only_server.server, [op.call])
    runner.join(30)
    # then it is told to retry, exactly as in Redis mode, and the first one answers
    assert duplicate.status_code == 409
    assert duplicate.headers["Content-Type"] == "application/problem+json"
    assert duplicate.json()["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert duplicate.headers["X-Idempotent-Result"] == "IN_PROGRESS"
    assert int(duplicate.headers["Retry-After"]) >= 1
    assert first[0].status_code == 200 and first[0].headers["X-Idempotent-Result"] == "MISS"
    assert database_only_server.runs(key) == 1


# --- the Redis node killed mid-storm ------------------------------------------------------


@pytest.mark.parametrize("name", OPERATIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_redis_killed_mid_storm_runs_the_view_once(
    django_db_setup: None, shop: Shop, tmp_path: Path, kind: str, name: str
):
    node = RedisNode().start()
    try:
        env = {**OWN_REDIS_ENV, "REDIS_URL": node.url}
        with counted_server(kind, env=env, log_dir=tmp_path) as counted:
            key = f"killed-{name}-{uuid.uuid4()}"
            op = operation(name, shop, key)
            # given 64 copies sent at once, the first one running its view under a Redis claim
            responses: list[httpx.Response] = []
            storm = threading.Thread(
                target=lambda: responses.extend(fire(counted.server, [op.call] * DUPLICATES))
            )
            storm.start()
            wait_until(lambda: counted.runs(key) == 1, what="the first run to start")
            assert node.client().keys("idem:*"), "the first request claimed in Redis"
            # when the Redis node is SIGKILLed while that view still runs
            assert node.process is not None
            node.process.kill()
            storm.join(120)
            # then the view ran once all the same (the duplicates that Redis did not answer
            # before it died waited for the run, or were told to retry, or came after it)
            assert len(responses) == DUPLICATES
            assert_executed_once(counted, op, key, responses, database_claimed=False)
    finally:
        node.remove()


# --- the breaker open ---------------------------------------------------------------------


@dataclass(frozen=True)
class SlowRedis:
    counted: CountedServer
    node: RedisNode


@pytest.fixture(scope="module", params=list(KINDS))
def slow_redis_server(
    request: pytest.FixtureRequest, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlowRedis]:
    node = RedisNode().start()
    proxy = SlowProxy(node.port)
    proxy.delay = SLOW_REDIS_SECONDS
    env = {**OWN_REDIS_ENV, "REDIS_URL": proxy.url, "IDEMPOTENCY_BREAKER": json.dumps(OPEN_BREAKER)}
    try:
        with counted_server(
            request.param, env=env, log_dir=tmp_path_factory.mktemp("breaker-open")
        ) as counted:
            yield SlowRedis(counted, node)
    finally:
        proxy.close()
        node.remove()


def trip_every_breaker(slow: SlowRedis, shop: Shop) -> None:
    """Send keyed writes (an unknown order's pay: 404, stored) until every worker answered
    some; each one's three Redis calls (rate limit, claim, finish) are slow, so each worker's
    breaker opens on its first."""
    server = slow.counted.server
    for attempt in range(20):
        prefix = f"trip-{attempt}-"
        calls = [
            Call(f"{ORDERS}999999999/pay/", {**shop.headers(), "Idempotency-Key": f"{prefix}{n}"})
            for n in range(16)
        ]
        fire(server, calls)
        served = {line.pid for line in server.access_log() if line.key.startswith("trip-")}
        if served >= server.worker_pids:
            return
    pytest.fail(f"not every worker answered a write: {served} of {server.worker_pids}")


@pytest.mark.parametrize("name", OPERATIONS)
def test_breaker_open_storm_runs_the_view_once(slow_redis_server: SlowRedis, shop: Shop, name: str):
    # given Redis so slow that every worker's breaker opened
    trip_every_breaker(slow_redis_server, shop)
    key = f"breaker-{name}-{uuid.uuid4()}"
    op = operation(name, shop, key)
    claims_before = set(slow_redis_server.node.client().keys("idem:*"))
    # when 64 copies arrive at once
    responses = fire(slow_redis_server.counted.server, [op.call] * DUPLICATES)
    # then no worker claimed the key in Redis, and the view ran once
    assert set(slow_redis_server.node.client().keys("idem:*")) == claims_before
    assert_executed_once(slow_redis_server.counted, op, key, responses)
