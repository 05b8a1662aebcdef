"""Duplicate storms against a live gunicorn: the engine's promise across real processes.

Many identical requests arrive at once on several worker processes, each with its own database
connection and Redis client (issue 3, item 10). Whatever the interleaving, one of them executes
(``X-Idempotent-Result: MISS``) and every other one either replays its answer byte for byte
(``HIT``) or is told to retry (409 ``IDEMPOTENCY_REQUEST_IN_PROGRESS`` with ``Retry-After``).
Each test runs with Redis + database and database-only (``live_gunicorn`` is parametrized).
"""

from __future__ import annotations

import asyncio
import random
import socket
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from django.db import connection

from idempotency.core.keys import automatic_key, key_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores.audit_stream import drain_audits
from ordering.models import Dish, Order, OrderStatus, Payment, WorkerLease
from ordering.worker_ids import KEY_PREFIX
from tests.flows.conftest import DATABASE_ONLY_ENV, ONE_REDIS_ENV, REDIS_URL, STOCK, Shop
from tests.support.live_server import AccessLogLine, LiveServer, live_gunicorn
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ORDERS = "/api/v1/orders/"
QUANTITY = 3


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    json: dict | None = None


def order_body(shop: Shop) -> dict:
    return {"items": [{"dish_id": shop.dish.pk, "quantity": QUANTITY}], "payment_method": "card"}


def place_order_call(shop: Shop, key: str) -> Call:
    return Call(ORDERS, {**shop.headers(), "Idempotency-Key": key}, order_body(shop))


def fire(server: LiveServer, calls: Sequence[Call]) -> list[httpx.Response]:
    """Send every call at once, each on its own connection, and collect the answers in order.

    No keep-alive: every request is a new connection that any worker may accept, so the
    duplicates spread over the worker processes instead of queueing behind one socket.
    """

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(calls), max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=server.url, timeout=DEADLINE_SECONDS, limits=limits
        ) as client:
            requests = [
                client.build_request("POST", call.path, headers=call.headers, json=call.json)
                for call in calls
            ]
            return await asyncio.gather(*(client.send(request) for request in requests))

    return asyncio.run(storm())


def outcome_of(response: httpx.Response, first: httpx.Response) -> str:
    """MISS, HIT or IN_PROGRESS if ``response`` keeps the contract (DESIGN §4) against the
    executed ``first``; otherwise a description of what broke it, for the assertion message."""
    result = response.headers.get("X-Idempotent-Result")
    if response is first:
        return "MISS"
    if response.status_code == first.status_code and result == "HIT":
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        if replayed and response.content == first.content:
            return "HIT"
    if response.status_code == 409 and result == "IN_PROGRESS":
        retry_after = response.headers.get("Retry-After", "")
        code = response.json().get("code")
        if code == "IDEMPOTENCY_REQUEST_IN_PROGRESS" and retry_after.isdigit():
            return "IN_PROGRESS"
    return f"BROKEN {response.status_code} {dict(response.headers)} {response.content!r}"


def executed_once(
    responses: Sequence[httpx.Response], *, status: int
) -> tuple[httpx.Response, Counter[str]]:
    """The one response that executed (MISS, with ``status``), and how all responses ended.

    Fails unless exactly one executed and every other one is a HIT or IN_PROGRESS."""
    misses = [r for r in responses if r.headers.get("X-Idempotent-Result") == "MISS"]
    assert len(misses) == 1, [(r.status_code, r.content) for r in misses]
    [miss] = misses
    assert miss.status_code == status, miss.content
    assert "Idempotent-Replayed" not in miss.headers
    counted = Counter(outcome_of(r, miss) for r in responses)
    assert set(counted) <= {"MISS", "HIT", "IN_PROGRESS"}, counted
    return miss, counted


def access_lines(
    server: LiveServer, *, expected: int, match: Callable[[AccessLogLine], bool]
) -> list[AccessLogLine]:
    """The access-log lines of this storm; gunicorn writes them just after the response."""
    wait_until(
        lambda: sum(map(match, server.access_log())) >= expected,
        what=f"{expected} access-log lines of this storm",
    )
    return [line for line in server.access_log() if match(line)]


def settled_audits(shop: Shop, *, expected: int) -> Counter[str]:
    """The duplicate audits the workers wrote, once ``expected`` arrived.

    With Redis they wait in the node's audit stream until a drain (beat's task, here this
    process) copies them. Waiting also keeps a late audit from landing after this test's
    database flush."""
    audits = DuplicateAudit.objects.filter(tenant_key=shop.tenant_key)
    wait_until(
        lambda: drain_audits() >= 0 and audits.count() >= expected,
        what=f"{expected} duplicate audits",
    )
    return Counter(audits.values_list("outcome", flat=True))


def stock_of(shop: Shop) -> int:
    return Dish.all_tenants.get(pk=shop.dish.pk).stock


def test_same_key_storm_executes_once(live_gunicorn: LiveServer, shop: Shop):
    # given a dish with stock and one order submitted 64 times with the same key
    duplicates = 64
    key = f"storm-{uuid.uuid4()}"
    # when all copies arrive at once
    responses = fire(live_gunicorn, [place_order_call(shop, key)] * duplicates)
    # then one executed, the others replayed it byte for byte or were asked to retry
    miss, counted = executed_once(responses, status=201)
    assert counted["HIT"] + counted["IN_PROGRESS"] == duplicates - 1
    # and exactly one order, one stock decrement and one idempotency record exist
    [order] = Order.objects.for_tenant(shop.tenant)
    assert miss.json()["id"] == str(order.pk)
    assert miss.headers["Location"] == f"{ORDERS}{order.pk}/"
    assert stock_of(shop) == STOCK - QUANTITY
    [record] = IdempotencyRecord.objects.filter(tenant_key=shop.tenant_key)
    assert (record.key, record.response_status, bytes(record.response_body)) == (
        key_digest(key),
        201,
        miss.content,
    )
    # and every absorbed duplicate was audited as what it was answered
    assert settled_audits(shop, expected=duplicates - 1) == counted - Counter({"MISS": 1})
    # and the storm really was spread over several worker processes
    lines = access_lines(live_gunicorn, expected=duplicates, match=lambda line: line.key == key)
    assert Counter(line.result for line in lines) == Counter(
        {"MISS": 1, "HIT": counted["HIT"], "IN_PROGRESS": counted["IN_PROGRESS"]}
    )
    assert len({line.pid for line in lines}) >= 2, lines


def test_mixed_storm_executes_each_key_once(live_gunicorn: LiveServer, shop: Shop):
    # given 4 different orders, each submitted 16 times with its own key, all interleaved
    keys = [f"mixed-{n}-{uuid.uuid4()}" for n in range(4)]
    calls = [place_order_call(shop, key) for key in keys for _ in range(16)]
    random.Random(7).shuffle(calls)
    # when all 64 arrive at once
    responses = fire(live_gunicorn, calls)
    # then each key executed exactly once, and its duplicates replayed or were asked to retry
    by_key: dict[str, list[httpx.Response]] = {key: [] for key in keys}
    for call, response in zip(calls, responses, strict=True):
        by_key[call.headers["Idempotency-Key"]].append(response)
    misses, counted = [], Counter[str]()
    for key, answers in by_key.items():
        miss, counted_for_key = executed_once(answers, status=201)
        assert counted_for_key.total() == 16, (key, counted_for_key)
        misses.append(miss)
        counted += counted_for_key
    # and there are exactly 4 orders, the ones the 4 misses answered, with 4 decrements of stock
    order_ids = set(Order.objects.for_tenant(shop.tenant).values_list("pk", flat=True))
    assert {int(miss.json()["id"]) for miss in misses} == order_ids and len(order_ids) == 4
    assert stock_of(shop) == STOCK - 4 * QUANTITY
    assert IdempotencyRecord.objects.filter(tenant_key=shop.tenant_key).count() == 4
    assert settled_audits(shop, expected=60) == counted - Counter({"MISS": 4})


def test_concurrent_keyless_pay_storm_pays_once(live_gunicorn: LiveServer, shop: Shop):
    # given an order placed through the live server
    [placed] = fire(live_gunicorn, [place_order_call(shop, f"to-pay-{uuid.uuid4()}")])
    assert placed.status_code == 201, placed.content
    order_id = placed.json()["id"]
    pay_path = f"{ORDERS}{order_id}/pay/"
    # when 32 pay requests without any Idempotency-Key arrive at once (a frantic double tap)
    responses = fire(live_gunicorn, [Call(pay_path, shop.headers())] * 32)
    # then one paid, the others replayed it (automatic key) or were asked to retry
    miss, counted = executed_once(responses, status=200)
    assert counted["HIT"] + counted["IN_PROGRESS"] == 31
    assert miss.json()["status"] == OrderStatus.PAYING
    # and the order has exactly one payment and is PAYING
    order = Order.all_tenants.get(pk=int(order_id))
    assert order.status == OrderStatus.PAYING
    assert Payment.all_tenants.filter(order=order).count() == 1
    [record] = IdempotencyRecord.objects.filter(
        tenant_key=shop.tenant_key, scope__endswith="|POST|api/v1/orders/<int:order_id>/pay/"
    )
    assert record.key == key_digest(automatic_key(record.fingerprint))  # digested like any key
    assert bytes(record.response_body) == miss.content
    assert settled_audits(shop, expected=31) == counted - Counter({"MISS": 1})


@pytest.mark.parametrize("mode", ["redis", "database"])
def test_worker_exit_hook_releases_order_id_lease(mode: str, shop: Shop, tmp_path: Path):
    """``config/gunicorn.py``'s ``worker_exit`` gives the worker id back when a worker stops,
    instead of keeping it out of use for a lease length."""
    # given a live server whose worker placed an order, and so leased an order-ID worker id
    env = DATABASE_ONLY_ENV if mode == "database" else ONE_REDIS_ENV
    with live_gunicorn(
        db_name=connection.settings_dict["NAME"], log_dir=tmp_path, env=env, workers=2
    ) as server:
        [placed] = fire(server, [place_order_call(shop, f"lease-{uuid.uuid4()}")])
        assert placed.status_code == 201, placed.content
        [line] = access_lines(server, expected=1, match=lambda line: line.path == ORDERS)
        owner_prefix = f"{socket.gethostname()}:{line.pid}:"
        assert leases_held_by(owner_prefix, mode=mode) == 1, server.log_tail()
    # when the server stopped (SIGTERM), then the lease is gone at once
    assert leases_held_by(owner_prefix, mode=mode) == 0, server.log_tail()


def leases_held_by(owner_prefix: str, *, mode: str) -> int:
    if mode == "database":
        return WorkerLease.objects.filter(owner__startswith=owner_prefix).count()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        owners = [client.get(key) or b"" for key in client.scan_iter(match=f"{KEY_PREFIX}*")]
    finally:
        client.close()
    return sum(owner.decode().startswith(owner_prefix) for owner in owners)
