"""The Python client (clients/python) against a live gunicorn, with real failures injected:
answers lost after the server committed, a request still running, a full rate-limit window."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.utils import timezone
from django.utils.http import http_date
from ordering_client import (
    ApiError,
    IdempotencyKeyReusedError,
    JsonFileStorage,
    MemoryStorage,
    NetworkError,
    OrderAlreadyPlacedError,
    OrderingClient,
    RetriesExhaustedError,
    RetryEvent,
    RetryPolicy,
    SessionChangedError,
    TokenKeys,
    UuidKeys,
)
from ordering_client.retry import parse_retry_after

from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from ordering.models import Order, Payment, WorkerLease
from ordering.worker_ids import WORKER_IDS
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.clients.conftest import (
    LEASE_SECONDS,
    RowLock,
    Shop,
    exhaust_write_rate,
    forget_the_tokens_of,
    set_tenant_status,
)
from tests.support.fault_proxy import DroppingProxy
from tests.support.live_server import LiveServer
from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ORDERS = "/api/v1/orders/"
FAST = RetryPolicy(base_delay=0.05, max_delay=0.5)


@dataclass(frozen=True)
class Exchange:
    """One request the client sent, as the wire saw it."""

    method: str
    path: str
    key: str | None
    sent: float  # monotonic
    answered: float
    status: int | None  # None: no answer (network error)
    retry_after: str | None


class RecordingTransport(httpx.HTTPTransport):
    """httpx's real transport, noting every request and its answer (or its failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        status = retry_after = None
        try:
            response = super().handle_request(request)
            status, retry_after = response.status_code, response.headers.get("retry-after")
            return response
        finally:
            self.log.append(
                Exchange(
                    request.method,
                    request.url.path,
                    request.headers.get("idempotency-key"),
                    sent,
                    time.monotonic(),
                    status,
                    retry_after,
                )
            )

    def posts(self, path: str = ORDERS) -> list[Exchange]:
        return [e for e in self.log if e.method == "POST" and e.path == path]


@pytest.fixture
def wire() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def make_client(shop: Shop, wire: RecordingTransport) -> Iterator:
    made: list[OrderingClient] = []

    def make(base_url: str, **options) -> OrderingClient:
        options.setdefault("retry", FAST)
        options.setdefault("transport", wire)
        client = OrderingClient(base_url, shop.publishable_key, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_an_answer_lost_after_commit_is_replayed_byte_for_byte_and_orders_once(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    events: list[RetryEvent] = []
    client = make_client(proxy.url, on_retry=events.append)
    proxy.drop_responses(1, path=ORDERS)

    result = client.place_order(shop.order_body(2))

    [lost] = proxy.dropped
    assert (lost.status, lost.headers["x-idempotent-result"]) == (201, "MISS")
    assert [e.status for e in wire.posts()] == [None, 201]
    assert len({e.key for e in wire.posts()}) == 1
    assert isinstance(events[0].error, NetworkError)
    assert (result.status, result.replayed) == (201, True)
    assert result.body == lost.body
    diner = client.session().diner_id
    assert shop.orders_of(diner) == 1
    assert len(client.orders()["results"]) == 1


def test_a_replayed_order_carries_null_contact_details_named_by_a_header(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client
) -> None:
    """The answer kept for retries has the diner's contact details blanked (the order row keeps
    them): the replay the client returns after a lost answer says which, and the order read
    afresh has them."""
    client = make_client(proxy.url)
    contact = {"phone": "+44 20 7946 0000", "address": "1 High Street"}
    proxy.drop_responses(1, path=ORDERS)

    result = client.place_order({**shop.order_body(), "contact": contact})

    assert result.replayed
    assert result.json()["contact"] == {"phone": None, "address": None}
    assert result.headers["idempotency-redacted"] == "contact.phone, contact.address"
    assert client.order(result.json()["id"])["contact"] == contact


def test_a_request_still_running_answers_409_then_the_client_gets_its_replay(
    client_server: LiveServer, shop: Shop, row_lock: RowLock, make_client, wire
) -> None:
    events: list[RetryEvent] = []

    def on_retry(event: RetryEvent) -> None:
        events.append(event)
        if event.status == 409:
            row_lock.release()  # the first attempt may now finish

    storage = MemoryStorage()  # one diner: the order's, then the impatient payer's
    order_id = make_client(client_server.url, storage=storage).place_order(shop.order_body())
    order_id = order_id.json()["id"]
    impatient = make_client(client_server.url, storage=storage, timeout=1.5, on_retry=on_retry)
    row_lock.hold(int(order_id))

    result = impatient.pay_order(order_id)

    # the attempts in the order they were sent (an abandoned attempt's thread notes its end
    # whenever it ends, after the retries' on a busy machine)
    sent = sorted(wire.posts(f"{ORDERS}{order_id}/pay/"), key=lambda e: e.sent)
    assert isinstance(events[0].error, NetworkError)  # the first gave up at the timeout
    refused = next(e for e in sent if e.status == 409)
    assert sent[0] is not refused and sent[0].status != 409  # the one that ran, held
    assert sent[-1].status == 200  # the replay last
    in_progress = next(e for e in events if e.status == 409)
    assert in_progress.code == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
    assert 1 <= in_progress.retry_after <= LEASE_SECONDS
    replayed = sent[sent.index(refused) + 1]
    assert replayed.sent - refused.answered >= in_progress.retry_after
    assert (result.status, result.replayed) == (200, True)
    assert Payment.objects.for_tenant(shop.tenant).filter(order_id=order_id).count() == 1


def test_429_waits_at_least_retry_after_then_succeeds(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    client = make_client(client_server.url)
    exhaust_write_rate(shop, client.session().diner_id, for_ms=4000)

    result = client.place_order(shop.order_body())

    limited, placed = wire.posts()
    assert (limited.status, placed.status) == (429, 201)
    retry_after = int(limited.retry_after or 0)
    assert retry_after >= 2
    assert placed.sent - limited.answered >= retry_after
    assert limited.key == placed.key == result.idempotency_key
    assert not result.replayed


def test_a_proxy_s_408_is_retried_with_the_same_key_and_orders_once(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """A load balancer answers 408 when it tired of waiting for a request's body (a phone
    between two cells): the server never saw the request. It was raised as a final ApiError,
    the order never placed although a retry under the same key is safe."""
    client = make_client(proxy.url)
    proxy.answer_instead(408, path=ORDERS)

    result = client.place_order(shop.order_body())

    timed_out, placed = wire.posts()
    assert (timed_out.status, placed.status) == (408, 201)
    assert timed_out.key == placed.key == result.idempotency_key
    assert (result.status, result.replayed) == (201, False)
    assert shop.orders_of(client.session().diner_id) == 1


def test_503_order_id_unavailable_waits_at_least_retry_after_then_orders_once(
    client_server_without_worker_ids: LiveServer, shop: Shop, make_client, wire
) -> None:
    held_until = timezone.now() + timedelta(minutes=5)
    WorkerLease.objects.bulk_create(
        [
            WorkerLease(worker_id=n, owner="other", expires_at=held_until, heartbeat_at=held_until)
            for n in range(WORKER_IDS)
        ],
        ignore_conflicts=True,  # an id a live server holds is held all the same
    )
    events: list[RetryEvent] = []

    def on_retry(event: RetryEvent) -> None:
        events.append(event)
        WorkerLease.objects.filter(owner="other").first().delete()  # a process exits

    client = make_client(client_server_without_worker_ids.url, on_retry=on_retry)
    result = client.place_order(shop.order_body())

    refused, placed = wire.posts()
    assert (refused.status, placed.status) == (503, 201)
    assert [(e.status, e.code, e.retry_after) for e in events] == [
        (503, "ORDER_ID_UNAVAILABLE", 6.0)
    ]
    assert placed.sent - refused.answered >= 6
    assert refused.key == placed.key == result.idempotency_key
    assert not result.replayed
    assert shop.orders_of(client.session().diner_id) == 1


def test_a_key_reused_for_another_payload_is_a_programming_error_never_retried(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    client = make_client(client_server.url)
    client.place_order(shop.order_body(1), idempotency_key="cart-7")

    with pytest.raises(IdempotencyKeyReusedError) as raised:
        client.place_order(shop.order_body(3), idempotency_key="cart-7")

    assert (raised.value.status, raised.value.code) == (422, "IDEMPOTENCY_KEY_REUSED")
    assert [e.status for e in wire.posts()] == [201, 422]
    assert shop.orders_of(client.session().diner_id) == 1


def test_another_payload_under_a_kept_operation_id_does_not_free_it_for_a_second_order(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    """cart-7 placed; the cart edited and sent again under cart-7 is refused 422. The key
    still stands for the first order: sent again, that order replays (red when the 422 made
    the client forget the key: the first order, sent again, got a new key and was placed
    twice)."""
    client = make_client(client_server.url)
    first = client.place_order(shop.order_body(1), operation_id="cart-7")

    with pytest.raises(IdempotencyKeyReusedError):
        client.place_order(shop.order_body(3), operation_id="cart-7")
    again = client.place_order(shop.order_body(1), operation_id="cart-7")

    assert again.replayed and again.idempotency_key == first.idempotency_key
    assert [e.status for e in wire.posts(ORDERS)] == [201, 422, 201]
    assert shop.orders_of(client.session().diner_id) == 1


def test_a_400_is_final_not_retried_and_its_key_forgotten(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage)
    bad = {"items": [{"dish_id": shop.dish.pk, "quantity": 0}], "payment_method": "card"}

    with pytest.raises(ApiError) as raised:
        client.place_order(bad)
    client.place_order(bad | {"items": [{"dish_id": shop.dish.pk, "quantity": 1}]})

    assert (raised.value.status, raised.value.code) == (400, "VALIDATION_ERROR")
    assert [e.status for e in wire.posts()] == [400, 201]
    assert [k for k in storage._items if ":op:" in k] == []


def test_cancel_is_an_operation_and_a_conflict_is_final(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    client = make_client(client_server.url)
    order_id = client.place_order(shop.order_body()).json()["id"]

    cancelled = client.cancel_order(order_id)
    with pytest.raises(ApiError) as raised:
        client.cancel_order(order_id, operation_id="cancel-again")

    assert cancelled.json()["status"] == "CANCELLED"
    assert (raised.value.status, raised.value.code) == (409, "ORDER_STATUS_CONFLICT")
    cancels = wire.posts(f"{ORDERS}{order_id}/cancel/")
    assert [e.status for e in cancels] == [200, 409]
    assert cancels[0].key != cancels[1].key


def crash_mid_order(
    path: Path, proxy: DroppingProxy, shop: Shop, make_client
) -> tuple[pytest.ExceptionInfo[RetriesExhaustedError], str]:
    """An app that placed an order whose answer was lost, then stopped: its storage in
    ``path`` keeps the session and the operation's key; (the error it saw, its diner)."""
    crashed = make_client(
        proxy.url, storage=JsonFileStorage(path), retry=RetryPolicy(max_attempts=1)
    )
    proxy.drop_responses(1, path=ORDERS)
    with pytest.raises(RetriesExhaustedError) as raised:
        crashed.place_order(shop.order_body(2))
    diner = crashed.session().diner_id
    crashed.close()
    return raised, diner


def tenant_status(server: LiveServer, shop: Shop, status: str, *, menu_answers: int) -> None:
    """Suspend or reactivate the restaurant, and wait until the live server says so."""
    set_tenant_status(shop, status)
    wait_until(
        lambda: (
            httpx.get(
                f"{server.url}/api/v1/menu/",
                headers={"Authorization": f"Api-Key {shop.publishable_key}"},
            ).status_code
            == menu_answers
        ),
        what=f"the menu to answer {menu_answers}",
    )


def test_a_refusal_from_before_the_engine_to_a_resumed_key_keeps_it(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """The order was placed but its answer lost; the retry met 403 TENANT_SUSPENDED, an
    answer of the authentication, given before the engine looked at the key. It says nothing
    of the order: the key stays, and once the restaurant is back the same call replays (red
    when any 4xx forgot the key: the call made a new one and ordered a second time)."""
    client = make_client(proxy.url, retry=RetryPolicy(max_attempts=1))
    proxy.drop_responses(1, path=ORDERS)
    with pytest.raises(RetriesExhaustedError):
        client.place_order(shop.order_body(), operation_id="cart-9")

    tenant_status(client_server, shop, "suspended", menu_answers=403)
    with pytest.raises(ApiError) as refused:
        client.place_order(shop.order_body(), operation_id="cart-9")
    tenant_status(client_server, shop, "active", menu_answers=200)
    again = client.place_order(shop.order_body(), operation_id="cart-9")

    assert (refused.value.status, refused.value.code) == (403, "TENANT_SUSPENDED")
    assert again.replayed
    assert [e.status for e in wire.posts(ORDERS)] == [None, 403, 201]
    assert len({e.key for e in wire.posts(ORDERS)}) == 1
    assert shop.orders_of(client.session().diner_id) == 1


def test_the_engine_s_final_refusal_to_a_resumed_key_forgets_it(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """The other side of the rule above: a refusal the engine gave under the key (it carries
    X-Idempotent-Result) is the operation's final answer, so the key goes and the same call
    later is a new operation (red when every refusal to a resumed key kept it: the key was
    sent a third time, and the refusal replayed for ever)."""
    body = {**shop.order_body(), "items": [{"dish_id": shop.dish.pk + 1000, "quantity": 1}]}
    client = make_client(proxy.url, retry=RetryPolicy(max_attempts=1))
    proxy.drop_responses(1, path=ORDERS)
    with pytest.raises(RetriesExhaustedError):
        client.place_order(body, operation_id="cart-10")

    with pytest.raises(ApiError) as replayed:
        client.place_order(body, operation_id="cart-10")
    with pytest.raises(ApiError) as anew:
        client.place_order(body, operation_id="cart-10")

    assert (replayed.value.status, replayed.value.code) == (422, "DISH_NOT_FOUND")
    assert replayed.value.headers["x-idempotent-result"] == "HIT"
    assert anew.value.headers["x-idempotent-result"] == "MISS"
    keys = [e.key for e in wire.posts(ORDERS)]
    assert len(keys) == 3 and keys[0] == keys[1] != keys[2]


def test_a_restarted_app_resends_with_the_stored_key_and_session_and_gets_the_replay(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, tmp_path: Path
) -> None:
    path = tmp_path / "ordering-client.json"
    raised, diner = crash_mid_order(path, proxy, shop, make_client)

    restarted = make_client(client_server.url, storage=JsonFileStorage(path))
    result = restarted.place_order(shop.order_body(2))

    assert isinstance(raised.value.last_error, NetworkError)
    assert result.idempotency_key == raised.value.idempotency_key
    assert (result.status, result.replayed) == (201, True)
    assert result.body == proxy.dropped[0].body
    assert restarted.session().diner_id == diner
    assert shop.orders_of(diner) == 1
    assert [k for k in json.loads(path.read_text()) if ":op:" in k] == []


def test_a_restart_after_the_guest_session_expired_does_not_resend_the_key_as_another_diner(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire, tmp_path
) -> None:
    """Keys are scoped per diner: the stored key sent by the new guest would place the order
    a second time. The client says so instead (red without the check: 2 orders)."""
    path = tmp_path / "ordering-client.json"
    raised, first_diner = crash_mid_order(path, proxy, shop, make_client)
    stored = json.loads(path.read_text())
    [entry] = [k for k in stored if k.endswith(":session")]
    stored[entry] = json.dumps(json.loads(stored[entry]) | {"expires_at": time.time() - 1})
    path.write_text(json.dumps(stored))
    posted = len(wire.posts())

    restarted = make_client(client_server.url, storage=JsonFileStorage(path))
    with pytest.raises(SessionChangedError) as changed:
        restarted.place_order(shop.order_body(2))

    assert changed.value.idempotency_key == raised.value.idempotency_key
    assert changed.value.previous_diner_id == first_diner
    assert changed.value.diner_id == restarted.session().diner_id != first_diner
    assert len(wire.posts()) == posted  # nothing sent
    assert shop.orders_of(first_diner) == 1
    # knowingly, as a new operation
    placed = restarted.place_order(shop.order_body(2), operation_id="again")
    assert (placed.status, placed.replayed) == (201, False)


class SlowStorage(MemoryStorage):
    """Storage whose reads take a while (a file on a busy phone): two calls that start at
    once would both read before either writes."""

    def get(self, key: str) -> str | None:
        time.sleep(0.05)
        return super().get(key)


def test_two_calls_of_one_operation_at_once_take_one_key_and_order_once(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    client = make_client(client_server.url, storage=SlowStorage())
    start = threading.Barrier(2)
    results: list = []

    def tap() -> None:
        start.wait(timeout=30)
        results.append(client.place_order(shop.order_body(3)))

    taps = [threading.Thread(target=tap) for _ in range(2)]
    for thread in taps:
        thread.start()
    for thread in taps:
        thread.join(timeout=120)
    assert len(results) == 2 and results[0] is results[1]  # the second joined the first
    assert len(wire.posts()) == 1
    assert shop.orders_of(client.session().diner_id) == 1


def test_two_calls_with_one_own_key_and_other_orders_at_once_do_not_join(
    client_server: LiveServer, shop: Shop, make_client
) -> None:
    """A caller's own key sent with two different orders at once: one is placed, the other is
    told the key was used for another order (red: it joined the first and got its answer, as
    if its own order had been placed)."""
    client = make_client(client_server.url, storage=SlowStorage())
    start = threading.Barrier(2)
    outcomes: list = []

    def order(quantity: int) -> None:
        start.wait(timeout=30)
        try:
            outcomes.append(
                client.place_order(shop.order_body(quantity), idempotency_key="own-key-1").status
            )
        except IdempotencyKeyReusedError:
            outcomes.append("reused")

    threads = [threading.Thread(target=order, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(map(str, outcomes)) == ["201", "reused"]
    assert shop.orders_of(client.session().diner_id) == 1


class SlowFileStorage(JsonFileStorage):
    def get(self, key: str) -> str | None:
        time.sleep(0.05)
        return super().get(key)


@pytest.mark.parametrize("shared", ["one storage object", "two storages of one file"])
def test_two_clients_sharing_a_storage_run_one_operation_once(
    client_server: LiveServer, shop: Shop, make_client, wire, tmp_path, shared
) -> None:
    """Two clients of one app on one storage (two screens, two threads) start the same
    operation at once: the second joins the first (red: each made its own key, 2 orders)."""
    if shared == "one storage object":
        storage = SlowStorage()
        storages = [storage, storage]
    else:
        storages = [SlowFileStorage(tmp_path / "ordering.json") for _ in range(2)]
    clients = [make_client(client_server.url, storage=each) for each in storages]
    diner = clients[0].session().diner_id
    assert clients[1].session().diner_id == diner  # the session is the storage's
    start = threading.Barrier(2)
    results: list = []

    def tap(client: OrderingClient) -> None:
        start.wait(timeout=30)
        results.append(client.place_order(shop.order_body(3), operation_id="cart-7"))

    taps = [threading.Thread(target=tap, args=(client,)) for client in clients]
    for thread in taps:
        thread.start()
    for thread in taps:
        thread.join(timeout=120)
    assert len(results) == 2 and results[0].body == results[1].body
    assert len(wire.posts()) == 1
    assert shop.orders_of(diner) == 1


@pytest.mark.parametrize("shared", ["one storage object", "two storages of one file"])
def test_two_clients_sharing_a_storage_open_one_guest_session(
    client_server: LiveServer, shop: Shop, make_client, wire, tmp_path, shared
) -> None:
    """Two clients of one app on one new storage place two orders at once: they take turns
    opening the session, so both orders are the stored guest's (red: each opened a guest of its
    own, and the order of the guest the storage did not keep was lost to the app)."""
    if shared == "one storage object":
        storage = MemoryStorage()
        storages = [storage, storage]
    else:
        storages = [JsonFileStorage(tmp_path / "ordering.json") for _ in range(2)]
    clients = [make_client(client_server.url, storage=each) for each in storages]
    start = threading.Barrier(2)
    placed: list = []

    def order(client: OrderingClient, quantity: int) -> None:
        start.wait(timeout=30)
        placed.append(client.place_order(shop.order_body(quantity)).json()["diner_id"])

    threads = [threading.Thread(target=order, args=(c, n)) for n, c in enumerate(clients, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(wire.posts("/api/v1/diner-sessions/")) == 1
    assert placed == [clients[0].session().diner_id] * 2
    assert shop.orders_of(placed[0]) == 2


def test_the_same_order_written_another_way_is_the_same_operation(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client
) -> None:
    """Key order, a decomposed accent and a null for an absent field: the server's
    fingerprint calls these the same order, and so does the default operation id (red with
    the body's bytes as sent: a second order)."""
    client = make_client(proxy.url, retry=RetryPolicy(max_attempts=1))
    proxy.drop_responses(1, path=ORDERS)
    with pytest.raises(RetriesExhaustedError) as raised:
        client.place_order(shop.order_body(2) | {"note": "Caf\u00e9"})
    rebuilt = {
        "note": "Cafe\u0301",
        "coupon_code": None,
        "payment_method": "card",
        "items": [{"quantity": 2, "dish_id": shop.dish.pk}],
    }
    result = client.place_order(rebuilt)  # type: ignore[arg-type]
    assert result.idempotency_key == raised.value.idempotency_key
    assert (result.status, result.replayed) == (201, True)
    assert shop.orders_of(client.session().diner_id) == 1


def test_the_session_is_refreshed_near_expiry_and_reopened_once_expired(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    storage = MemoryStorage()
    first = make_client(client_server.url, storage=storage).session()

    refreshed = make_client(client_server.url, storage=storage, refresh_margin=10**9).session()
    assert refreshed.diner_id == first.diner_id
    assert refreshed.expires_at >= int(first.expires_at)  # whole seconds
    assert len(wire.posts("/api/v1/diner-sessions/refresh/")) == 1

    [entry] = [k for k in storage._items if k.endswith(":session")]
    storage.set(entry, json.dumps(first.__dict__ | {"expires_at": time.time() - 1}))
    reopened = make_client(client_server.url, storage=storage)
    reopened.place_order(shop.order_body())
    assert reopened.session().diner_id != first.diner_id
    assert len(wire.posts("/api/v1/diner-sessions/")) == 2
    assert len(wire.posts("/api/v1/diner-sessions/refresh/")) == 1


def test_a_device_clock_a_day_ahead_keeps_its_session_and_its_batch_of_tokens(
    client_server: LiveServer, shop: Shop, make_client, wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A phone whose clock is 25 hours ahead of the server's: the session's and the tokens'
    expiries are read on the server's clock (the answer's ``Date``), so one guest session and
    one batch of tokens serve every order (red: each call opened two guest sessions and raised
    SessionChangedError, ordering nothing; and each operation asked for a new batch)."""
    device_clock = time.time
    monkeypatch.setattr(time, "time", lambda: device_clock() + 25 * 3600)
    client = make_client(client_server.url, keys=TokenKeys(batch_size=5))

    results = [client.place_order(shop.order_body(n)) for n in (1, 2, 3)]

    assert [r.status for r in results] == [201, 201, 201]
    assert len(wire.posts("/api/v1/diner-sessions/")) == 1
    assert wire.posts("/api/v1/diner-sessions/refresh/") == []
    assert len(wire.posts("/api/v1/idempotency-tokens/")) == 1
    assert shop.orders_of(client.session().diner_id) == 3


def test_a_device_clock_in_step_with_the_server_s_keeps_the_expiry_as_said() -> None:
    """Date is in whole seconds and comes after the network's delay: a clock in step with the
    server's keeps the session's expiry exactly as the server said it, so a refresh never
    seems to shorten it (red when every answer's Date moved it: up to a second off, and the
    refresh test above failed now and then)."""
    expires = timezone.now() + timedelta(hours=24, microseconds=987_654)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            201,
            json={"token": "t", "diner_id": "guest_1", "expires_at": expires.isoformat()},
            headers={"Date": http_date(time.time() - 2)},  # whole seconds, and the way back
        )

    client = OrderingClient(
        "http://api.test", "pk_test.secret", transport=httpx.MockTransport(answer)
    )
    session = client.session()
    client.close()

    assert session.expires_at == expires.timestamp()


def test_a_session_printed_or_logged_does_not_show_its_token() -> None:
    """The session's token is the diner's credential (``Authorization: Bearer``): an app that
    logs its session, or an error report that prints a frame's locals, must not write it out
    (red: the dataclass's own repr showed ``token='eyJ0…'`` whole). Its diner and expiry,
    which an app's log wants, are still shown."""
    token = "eyJ0IjoxLCJzIjoiYWJjIn0:c2lnbmF0dXJlLW9mLXRoZS1zZXNzaW9u"

    def answer(request: httpx.Request) -> httpx.Response:
        expires = timezone.now() + timedelta(hours=24)
        body = {"token": token, "diner_id": "guest_1", "expires_at": expires.isoformat()}
        return httpx.Response(201, json=body)

    with OrderingClient(
        "http://api.test", "pk_test.secret", transport=httpx.MockTransport(answer)
    ) as client:
        session = client.session()

    shown = f"{session!r} {session!s} {[session]}"
    assert session.token == token
    assert token not in shown
    assert "guest_1" in shown


@pytest.fixture
def device_in_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time zone is nine hours east of UTC, as a phone's may be."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "date_format",
    [
        pytest.param("%a %b %d %H:%M:%S %Y", id="asctime"),
        pytest.param("%a, %d %b %Y %H:%M:%S -0000", id="zone-unknown"),
    ],
)
def test_a_session_s_date_in_any_http_date_format_is_gmt_wherever_the_device_is(
    device_in_tokyo: None, date_format: str
) -> None:
    """RFC 9110 has every HTTP date in GMT, the asctime one (which names no zone) and one
    whose zone is "-0000" too. Read as the device's local time, the server's clock seemed
    nine hours behind this one in Tokyo, and the session's expiry was moved nine hours past
    the server's (red): its token was sent for hours after it had expired, each write
    refused 401; west of UTC the session seemed to end hours early."""
    expires = timezone.now() + timedelta(hours=24)

    def answer(request: httpx.Request) -> httpx.Response:
        now = timezone.now().astimezone(UTC)
        return httpx.Response(
            201,
            json={"token": "t", "diner_id": "guest_1", "expires_at": expires.isoformat()},
            headers={"Date": now.strftime(date_format)},
        )

    client = OrderingClient(
        "http://api.test", "pk_test.secret", transport=httpx.MockTransport(answer)
    )
    session = client.session()
    client.close()

    assert session.expires_at == expires.timestamp()


def test_pre_issued_tokens_come_in_batches_one_per_operation_and_replay_after_a_lost_answer(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    client = make_client(proxy.url, keys=TokenKeys(batch_size=2))
    proxy.drop_responses(1, path=ORDERS)

    results = [client.place_order(shop.order_body(n)) for n in (1, 2, 3)]

    assert len(wire.posts("/api/v1/idempotency-tokens/")) == 2
    keys = [r.idempotency_key for r in results]
    assert all(k.startswith("tok_") for k in keys) and len(set(keys)) == 3
    assert results[0].replayed and results[0].body == proxy.dropped[0].body
    assert shop.orders_of(client.session().diner_id) == 3


def test_a_batch_redis_lost_costs_no_order_the_client_takes_new_keys(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    """After the server's Redis lost the tenant's unused tokens (restarted empty, a failover),
    the next token the client spends is refused 422 IDEMPOTENCY_TOKEN_UNKNOWN before anything
    ran. The client drops the batch and sends the order once more with a new key (red without
    it: that order, and every later one until the batch is spent, fails with the 422)."""
    client = make_client(client_server.url, keys=TokenKeys(batch_size=5))
    first = client.place_order(shop.order_body(1))
    assert forget_the_tokens_of(shop) >= 4

    later = [client.place_order(shop.order_body(n)) for n in (2, 3)]

    refused = [e for e in wire.posts(ORDERS) if e.status == 422]
    assert len(refused) == 1
    assert len(wire.posts("/api/v1/idempotency-tokens/")) == 2
    assert [r.status for r in later] == [201, 201]
    keys = [first.idempotency_key, *(r.idempotency_key for r in later)]
    assert all(k.startswith("tok_") for k in keys) and len(set(keys)) == 3
    assert shop.orders_of(client.session().diner_id) == 3


def test_tokens_that_live_less_than_the_expiry_margin_serve_a_batch_each() -> None:
    """A deployment whose tokens live 30 minutes (IDEMPOTENCY_TOKEN_TTL_SECONDS=1800), under
    TokenKeys' hour of margin: the margin is cut to half the batch's life, so one batch serves
    three orders (red: a batch of five was asked for each order, four of them wasted)."""
    issued: list[int] = []
    order_keys: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        now = timezone.now()
        dated = {"Date": http_date(now.timestamp())}
        if request.url.path == "/api/v1/diner-sessions/":
            expires = (now + timedelta(hours=24)).isoformat()
            return httpx.Response(
                201,
                json={"token": "t", "diner_id": "guest_1", "expires_at": expires},
                headers=dated,
            )
        if request.url.path == "/api/v1/idempotency-tokens/":
            count = json.loads(request.content)["count"]
            issued.append(count)
            tokens = [f"tok_{len(issued)}_{n}" for n in range(count)]
            expires = (now + timedelta(seconds=1800)).isoformat()
            return httpx.Response(
                201,
                json={"tokens": tokens, "expires_at": expires, "ttl_seconds": 1800},
                headers=dated,
            )
        order_keys.append(request.headers.get("idempotency-key"))
        return httpx.Response(201, json={"id": "1"}, headers={"X-Idempotent-Result": "MISS"})

    client = OrderingClient(
        "http://api.test",
        "pk_test.secret",
        transport=httpx.MockTransport(answer),
        keys=TokenKeys(batch_size=5),
    )
    for quantity in (1, 2, 3):
        client.place_order(
            {"items": [{"dish_id": 1, "quantity": quantity}], "payment_method": "card"}
        )
    client.close()

    assert issued == [5]
    assert order_keys == ["tok_1_0", "tok_1_1", "tok_1_2"]


def test_without_tokens_on_the_server_the_client_falls_back_to_uuid_keys(
    client_server_database: LiveServer, shop: Shop, make_client, wire
) -> None:
    client = make_client(client_server_database.url, keys=TokenKeys())

    result = client.place_order(shop.order_body())

    [refused] = wire.posts("/api/v1/idempotency-tokens/")
    assert refused.status == 503
    assert result.status == 201 and not result.idempotency_key.startswith("tok_")
    assert len(result.idempotency_key) == 36


def test_retries_are_bounded_by_attempts_and_by_total_time(shop: Shop, make_client) -> None:
    closed = make_client(
        f"http://127.0.0.1:{free_port()}", retry=RetryPolicy(max_attempts=3, base_delay=0.01)
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        closed.menu()
    assert raised.value.attempts == 3
    assert isinstance(raised.value.last_error, NetworkError)

    impatient = make_client(
        f"http://127.0.0.1:{free_port()}",
        retry=RetryPolicy(max_attempts=100, base_delay=10, max_elapsed=1),
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        impatient.menu()
    assert raised.value.attempts < 100


def test_retries_past_a_thousand_stay_capped_and_end_in_retries_exhausted(
    shop: Shop, make_client
) -> None:
    """A policy bounded by time rather than attempts (a background job's) gets past retry
    1024, where the doubling no longer fits a float: the wait stays ``max_delay``, and giving
    up is :class:`RetriesExhaustedError`, not an ``OverflowError`` out of the retry loop."""
    patient = make_client(
        f"http://127.0.0.1:{free_port()}",
        retry=RetryPolicy(max_attempts=1030, base_delay=0.0001, max_delay=0.0001),
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        patient.menu()
    assert raised.value.attempts == 1030
    assert isinstance(raised.value.last_error, NetworkError)
    assert RetryPolicy().delay(1100, None, rng=lambda: 1.0) == 30.0


@pytest.mark.parametrize(
    ("retry", "rng", "retry_after", "expected"),
    [
        pytest.param(1, 1.0, None, 0.5, id="first-retry-cap"),
        pytest.param(4, 1.0, None, 4.0, id="doubles"),
        pytest.param(20, 1.0, None, 30.0, id="capped"),
        pytest.param(3, 0.25, None, 0.5, id="jittered"),
        pytest.param(1, 0.0, 7.0, 7.0, id="retry-after-floor"),
    ],
)
def test_backoff_is_exponential_with_full_jitter_and_retry_after_as_a_floor(
    retry: int, rng: float, retry_after: float | None, expected: float
) -> None:
    assert RetryPolicy().delay(retry, retry_after, rng=lambda: rng) == expected


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:05 GMT", now=now) == 5.0
    assert parse_retry_after("soon") is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("\u00b2", id="superscript-two"),  # byte 0xB2 read as Latin-1
        pytest.param("\u0661\u0662", id="arabic-indic-digits"),
        pytest.param("\uff13", id="fullwidth-three"),
    ],
)
def test_a_retry_after_of_digits_other_than_ascii_is_unreadable(value: str) -> None:
    """delta-seconds are ASCII digits (RFC 9110). A proxy's header of other characters that
    Python calls digits is unreadable, as documented, so the client waits its own backoff
    (red: ValueError out of the retry loop for U+00B2, and 12 s waited for Arabic-Indic)."""
    assert parse_retry_after(value) is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("Thu, 01 Jan 2026 12:00:05 GMT", id="imf-fixdate"),
        pytest.param("Thursday, 01-Jan-26 12:00:05 GMT", id="rfc850"),
        pytest.param("Thu Jan  1 12:00:05 2026", id="asctime"),
        pytest.param("Thu, 01 Jan 2026 12:00:05 -0000", id="zone-unknown"),
    ],
)
def test_retry_after_reads_every_http_date_format_as_gmt(value: str) -> None:
    """RFC 9110 has a recipient read all three HTTP date formats, every one in GMT. An asctime
    date names no zone: read as a local time, it could not be compared with the clock, and the
    call raised ``TypeError`` out of its retry loop instead of waiting."""
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after(value, now=now) == 5.0


def waiting_client(
    answer: Callable[[httpx.Request], httpx.Response], waited: list[float | None]
) -> OrderingClient:
    """A client of ``answer`` that retries at once, noting each wait ``Retry-After`` asked for."""
    return OrderingClient(
        "http://api.test",
        "pk_test.secret",
        transport=httpx.MockTransport(answer),
        retry=FAST,
        on_retry=lambda event: waited.append(event.retry_after),
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param({"Retry-After": "Thu, 01 Jan 99999999999999999999 12:00:05 GMT"}, None),
        pytest.param(
            {"Retry-After": "0", "Date": "Thu, 01 Jan 99999999999999999999 12:00:05 GMT"}, 0.0
        ),
    ],
    ids=["retry-after", "date"],
)
def test_a_date_whose_year_no_clock_can_hold_is_unreadable(
    headers: dict[str, str], expected: float | None
) -> None:
    """A proxy's 503 whose ``Retry-After`` (or ``Date``) names a year of twenty digits is as
    unreadable as any other garbage there: the client waits its own backoff and retries
    (red: ``OverflowError`` out of the retry loop, neither an answer nor an
    ``OrderingError``)."""
    calls: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) > 1:
            return httpx.Response(200, json=[])
        return httpx.Response(503, json={}, headers=headers)

    waited: list[float | None] = []
    client = waiting_client(answer, waited)
    try:
        assert client.menu() == []
    finally:
        client.close()

    assert waited == [expected]


@pytest.mark.parametrize(
    ("server_offset", "dated", "expected"),
    [
        pytest.param(-3600, True, [1.0], id="device-an-hour-ahead"),
        pytest.param(3600, True, [1.0], id="device-an-hour-behind"),
        pytest.param(3600, False, [], id="no-date-on-the-device-clock"),
    ],
)
def test_a_retry_after_date_is_counted_from_the_answer_s_date(
    server_offset: float, dated: bool, expected: list[float]
) -> None:
    """A proxy's 503 asks to come back in a second, as an HTTP date on its own clock. It is
    counted from the answer's ``Date``, not the device's clock (red: a device an hour ahead
    did not wait at all, and one an hour behind gave up at once, as a wait past
    ``max_elapsed`` is not started). Without a ``Date`` it is the device's clock: an hour
    away, past ``max_elapsed``, so no wait is started."""
    calls: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) > 1:
            return httpx.Response(200, json=[])
        server_now = time.time() + server_offset
        headers = {"Retry-After": http_date(server_now + 1)}
        if dated:
            headers["Date"] = http_date(server_now)
        return httpx.Response(503, json={}, headers=headers)

    waited: list[float | None] = []
    client = waiting_client(answer, waited)
    try:
        outcome: object = client.menu()
    except RetriesExhaustedError as error:
        outcome = error.attempts
    finally:
        client.close()

    assert waited == expected
    assert outcome == ([] if dated else 1)


# --- one diner per key, kept keys, and answers that name an order ---------------------------


def expire_the_stored_session(storage: MemoryStorage, *, in_seconds: float = -1.0) -> None:
    """Rewrite the stored session's ``expires_at``: in the past, as at its maximum age (a new
    guest is opened next), or within ``refresh_margin`` (it is refreshed next)."""
    [entry] = [k for k in storage._items if k.endswith(":session")]
    session = json.loads(storage._items[entry])
    storage.set(entry, json.dumps(session | {"expires_at": time.time() + in_seconds}))


def revoke_sessions(server: LiveServer, shop: Shop, diner_id: str) -> None:
    """The merchant ends every session of the diner, then waits out the bound within which
    every worker sees it (its cache of session states)."""
    _, merchant_key = issue_api_key(
        tenant=shop.tenant, name="merchant", kind=ApiClient.Kind.MERCHANT
    )
    revoked = httpx.post(
        f"{server.url}/api/v1/diners/{diner_id}/revoke-sessions/",
        headers={"Authorization": f"Api-Key {merchant_key}"},
        timeout=DEADLINE_SECONDS,
    )
    assert revoked.json()["revoked"] >= 1
    time.sleep(settings.DINER_SESSION_STATE_CACHE_SECONDS + 0.1)


def test_a_retry_after_the_session_expired_is_not_sent_as_the_new_guest(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """The answer is lost, and the session reaches its maximum age before the retry: sent as
    the new guest, the same key would place the order again (red without the check before
    each attempt: 2 orders, one per diner)."""
    storage = MemoryStorage()
    client = make_client(
        proxy.url, storage=storage, on_retry=lambda _: expire_the_stored_session(storage)
    )
    first_diner = client.session().diner_id
    proxy.drop_responses(1, path=ORDERS)

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2))

    assert proxy.dropped[0].status == 201
    [sent] = wire.posts()  # the retry was not sent
    assert changed.value.idempotency_key == sent.key
    assert changed.value.previous_diner_id == first_diner
    assert changed.value.diner_id == client.session().diner_id != first_diner
    # the key stays stored: calling again says the same, and sends nothing
    with pytest.raises(SessionChangedError) as again:
        client.place_order(shop.order_body(2))
    assert again.value.idempotency_key == sent.key
    assert len(wire.posts()) == 1
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_key_of_the_caller_s_own_is_sent_as_the_call_s_diner_only(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """``idempotency_key=``: the answer is lost and the session expires before the retry; the
    retry is not sent as the new guest (red: it was, 2 orders)."""
    storage = MemoryStorage()
    client = make_client(
        proxy.url, storage=storage, on_retry=lambda _: expire_the_stored_session(storage)
    )
    first_diner = client.session().diner_id
    proxy.drop_responses(1, path=ORDERS)
    own = str(uuid.uuid4())

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2), idempotency_key=own)

    assert (changed.value.idempotency_key, changed.value.previous_diner_id) == (own, first_diner)
    assert len(wire.posts()) == 1
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_key_of_the_caller_s_own_whose_outcome_is_unknown_is_not_sent_as_another_diner(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """``idempotency_key=``: every answer is lost (the order was placed), then the merchant
    revokes the diner's sessions; the app calls again with the same key, as the README's
    RetriesExhaustedError advice says. Red without storing the key with its diner: a 401
    ApiError, then the key sent as a new guest placed a second order (the TypeScript client
    raised SessionChangedError both times)."""
    client = make_client(proxy.url, retry=RetryPolicy(max_attempts=2, base_delay=0.05))
    diner = client.session().diner_id
    proxy.drop_responses(2, path=ORDERS)
    own = str(uuid.uuid4())
    with pytest.raises(RetriesExhaustedError):
        client.place_order(shop.order_body(2), idempotency_key=own)
    revoke_sessions(client_server, shop, diner)

    with pytest.raises(SessionChangedError) as revoked:
        client.place_order(shop.order_body(2), idempotency_key=own)
    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2), idempotency_key=own)

    assert (revoked.value.idempotency_key, revoked.value.diner_id) == (own, None)
    assert changed.value.previous_diner_id == diner != changed.value.diner_id
    assert [e.status for e in wire.posts()] == [None, None, 401]
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_key_of_the_caller_s_own_is_forgotten_after_its_final_answer(
    client_server: LiveServer, shop: Shop, make_client
) -> None:
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage)
    own = str(uuid.uuid4())

    placed = client.place_order(shop.order_body(), idempotency_key=own)
    replayed = client.place_order(shop.order_body(), idempotency_key=own)

    assert (placed.replayed, replayed.replayed) == (False, True)
    assert not [k for k in storage._items if own in k]


@pytest.mark.parametrize(
    "own", ["заказ-1", "café-1", "cart\n7"], ids=["cyrillic", "latin-1", "newline"]
)
def test_a_key_of_the_caller_s_own_no_request_can_carry_is_refused_before_anything_is_sent(
    client_server: LiveServer, shop: Shop, make_client, wire, own: str
) -> None:
    """A character outside printable ASCII, which the API refuses in a key (and httpx cannot
    even put in a header): refused at once, nothing sent or stored (red: a UnicodeEncodeError
    out of httpx, or five attempts that never left the device retried into
    RetriesExhaustedError, "outcome unknown")."""
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage)

    with pytest.raises(ValueError, match="idempotency_key"):
        client.place_order(shop.order_body(), idempotency_key=own)

    assert wire.posts() == []
    assert not [k for k in storage._items if ":key:" in k]
    placed = client.place_order(shop.order_body(), idempotency_key="cart-7")
    assert (placed.status, shop.orders_of(client.session().diner_id)) == (201, 1)


@pytest.mark.parametrize("lost", [True, False], ids=["answer-lost", "already-ended"])
def test_signing_out_a_session_that_has_ended_is_done_not_an_error(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire, lost: bool
) -> None:
    """The sign-out's answer is lost and the retry finds the session ended (401), or the
    merchant had ended it already: the diner is signed out either way (red: ApiError 401)."""
    storage = MemoryStorage()
    client = make_client(proxy.url, storage=storage)
    diner = client.session().diner_id
    if lost:
        proxy.drop_responses(1, path="/api/v1/diner-sessions/end/")
    else:
        revoke_sessions(client_server, shop, diner)

    client.end_session()

    ends = [e.status for e in wire.posts("/api/v1/diner-sessions/end/")]
    assert ends == ([None, 401] if lost else [401])
    assert not [k for k in storage._items if k.endswith(":session")]
    assert client.session().diner_id != diner


def test_a_key_never_sent_before_the_session_changed_is_forgotten(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    """The session ends between making the operation's key and sending it (it expired then, or
    another client on the storage, or a 401 to another call, replaced it): the key was never
    sent, so nothing can have been placed. The call says the session changed and forgets the
    key, and the next call places the order (red: the key stayed, and every later call of the
    operation raised SessionChangedError, sending nothing; the TypeScript client forgot it)."""
    storage = MemoryStorage()

    class SessionEndsOnceTheKeyIsMade(UuidKeys):
        ended = False

        def next_key(self, issue, diner_id: str) -> str:
            if not self.ended:
                self.ended = True
                expire_the_stored_session(storage)
            return super().next_key(issue, diner_id)

    client = make_client(client_server.url, storage=storage, keys=SessionEndsOnceTheKeyIsMade())
    first_diner = client.session().diner_id

    with pytest.raises(SessionChangedError):
        client.place_order(shop.order_body(2))
    assert wire.posts() == []
    placed = client.place_order(shop.order_body(2))

    assert (placed.status, placed.replayed) == (201, False)
    assert shop.orders_of(first_diner) == 0
    assert shop.orders_of(client.session().diner_id) == 1


def test_a_retry_after_the_session_was_refreshed_goes_on_as_the_same_diner(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    storage = MemoryStorage()
    client = make_client(
        proxy.url,
        storage=storage,
        on_retry=lambda _: expire_the_stored_session(storage, in_seconds=60),
    )
    diner = client.session().diner_id
    proxy.drop_responses(1, path=ORDERS)

    result = client.place_order(shop.order_body(2))

    assert len(wire.posts("/api/v1/diner-sessions/refresh/")) == 1
    assert [e.status for e in wire.posts()] == [None, 201]
    assert (result.status, result.replayed) == (201, True)
    assert client.session().diner_id == diner
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_401_to_a_retry_keeps_the_key_and_says_the_session_changed(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire
) -> None:
    """The answer is lost and the merchant revokes the diner's sessions before the retry:
    the 401 is no final answer about the order (red when it is an ApiError that forgets the
    key: the next call places a second order as a new guest)."""
    storage = MemoryStorage()
    diners: list[str] = []
    client = make_client(
        proxy.url,
        storage=storage,
        on_retry=lambda _: revoke_sessions(client_server, shop, diners[0]),
    )
    diners.append(client.session().diner_id)
    proxy.drop_responses(1, path=ORDERS)

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2))

    lost, refused = wire.posts()
    assert (lost.status, refused.status) == (None, 401)
    assert changed.value.idempotency_key == lost.key == refused.key
    assert (changed.value.previous_diner_id, changed.value.diner_id) == (diners[0], None)
    assert isinstance(changed.value.__cause__, ApiError)
    assert changed.value.__cause__.code == "SESSION_REVOKED"
    # the next call opens a new guest, which the kept key is not sent as
    with pytest.raises(SessionChangedError) as again:
        client.place_order(shop.order_body(2))
    assert again.value.idempotency_key == lost.key
    assert again.value.diner_id not in (None, diners[0])
    assert len(wire.posts()) == 2
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_401_to_a_key_resumed_from_storage_keeps_it_and_says_the_session_changed(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, make_client, wire, tmp_path
) -> None:
    """The app crashed mid-order; the diner's sessions were revoked before it restarted. The
    resumed key may have placed the order (red when only a retry in the same call counts: an
    ApiError that forgets the key, and the next call orders again)."""
    path = tmp_path / "ordering-client.json"
    raised, diner = crash_mid_order(path, proxy, shop, make_client)
    revoke_sessions(client_server, shop, diner)

    restarted = make_client(client_server.url, storage=JsonFileStorage(path))
    with pytest.raises(SessionChangedError) as changed:
        restarted.place_order(shop.order_body(2))
    with pytest.raises(SessionChangedError) as again:
        restarted.place_order(shop.order_body(2))

    assert wire.posts()[-1].status == 401
    assert changed.value.idempotency_key == raised.value.idempotency_key
    assert (changed.value.previous_diner_id, changed.value.diner_id) == (diner, None)
    assert again.value.idempotency_key == raised.value.idempotency_key
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_401_to_a_key_never_sent_before_is_final_and_forgets_the_key(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage)
    diner = client.session().diner_id
    revoke_sessions(client_server, shop, diner)

    with pytest.raises(ApiError) as raised:
        client.place_order(shop.order_body())
    placed = client.place_order(shop.order_body())

    assert not isinstance(raised.value, SessionChangedError)
    assert (raised.value.status, raised.value.code) == (401, "SESSION_REVOKED")
    assert [e.status for e in wire.posts()] == [401, 201]
    assert client.session().diner_id != diner
    assert not placed.replayed


def op_entries(storage: MemoryStorage) -> list[str]:
    return sorted(k.partition(":op:")[2] for k in storage._items if ":op:" in k)


def test_an_explicit_operation_id_is_kept_after_success_and_replays_the_first_answer(
    client_server: LiveServer, shop: Shop, make_client, wire, tmp_path: Path
) -> None:
    """The app was killed after the call returned, before it saved the order: calling again
    with the same operation_id replays the answer (red when the key is forgotten at success:
    a second order)."""
    path = tmp_path / "ordering-client.json"
    killed = make_client(client_server.url, storage=JsonFileStorage(path))
    first = killed.place_order(shop.order_body(2), operation_id="cart-42")
    killed.close()

    restarted = make_client(client_server.url, storage=JsonFileStorage(path))
    again = restarted.place_order(shop.order_body(2), operation_id="cart-42")

    assert (first.replayed, again.replayed) == (False, True)
    assert again.body == first.body and again.idempotency_key == first.idempotency_key
    assert Order.objects.for_tenant(shop.tenant).count() == 1
    # the default operation id is forgotten at the final answer: the same order again is new
    assert not restarted.place_order(shop.order_body(2)).replayed
    assert not restarted.place_order(shop.order_body(2)).replayed
    assert Order.objects.for_tenant(shop.tenant).count() == 3
    # a final error answer forgets an explicit operation_id too
    bad = {"items": [{"dish_id": shop.dish.pk, "quantity": 0}], "payment_method": "card"}
    with pytest.raises(ApiError):
        restarted.place_order(bad, operation_id="cart-bad")  # type: ignore[arg-type]
    stored = json.loads(path.read_text())
    assert [k.partition(":op:")[2] for k in stored if ":op:" in k] == ["cart-42"]


def test_kept_finished_operations_are_pruned_after_operation_ttl(
    client_server: LiveServer, shop: Shop, make_client
) -> None:
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage, operation_ttl=1.0)
    client.place_order(shop.order_body(), operation_id="cart-1")
    assert op_entries(storage) == ["cart-1"]
    time.sleep(1.1)  # cart-1's key is now older than operation_ttl

    client.place_order(shop.order_body(), operation_id="cart-2")

    assert op_entries(storage) == ["cart-2"]
    [index] = [v for k, v in storage._items.items() if k.endswith(":finished")]
    assert list(json.loads(index)) == [k for k in storage._items if k.endswith(":op:cart-2")]
    # cart-1 again, that much later, is a new operation
    assert not client.place_order(shop.order_body(), operation_id="cart-1").replayed
    assert Order.objects.for_tenant(shop.tenant).count() == 3


def test_operation_ttl_defaults_to_the_servers_72_hours() -> None:
    client = OrderingClient("http://127.0.0.1:9", "pk_test.secret")
    client.close()
    assert client.operation_ttl == 72 * 3600 == 259200


def test_a_key_whose_answer_is_no_longer_kept_is_order_already_placed_naming_the_order(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    """The server no longer keeps the first answer (purged): it names the order instead of
    replaying it, and the client raises OrderAlreadyPlacedError with its order_id (red with
    a plain ApiError); the kept key keeps saying so, nothing new is placed."""
    client = make_client(client_server.url)
    placed = client.place_order(shop.order_body(2), operation_id="cart-9")
    record = wait_until(
        lambda: IdempotencyRecord.objects.first(), what="the order's idempotency record"
    )
    purge_record(record)
    time.sleep(0.5)  # the purge reaches the workers' result caches over Redis pub/sub

    with pytest.raises(OrderAlreadyPlacedError) as raised:
        client.place_order(shop.order_body(2), operation_id="cart-9")
    with pytest.raises(OrderAlreadyPlacedError) as again:
        client.place_order(shop.order_body(2), operation_id="cart-9")

    order_id = placed.json()["id"]
    assert (raised.value.status, raised.value.code) == (409, "ORDER_ALREADY_PLACED")
    assert raised.value.order_id == again.value.order_id == str(order_id)
    assert raised.value.headers["location"] == f"{ORDERS}{order_id}/"
    assert client.order(raised.value.order_id)["id"] == order_id
    assert {e.key for e in wire.posts()} == {placed.idempotency_key}
    assert Order.objects.for_tenant(shop.tenant).count() == 1


class CaptivePortal(httpx.BaseTransport):
    """Answers the first ``pages`` requests to ``path`` itself with a 200 sign-in page, as a
    cafe's wifi does; passes everything else to ``through``."""

    def __init__(self, through: httpx.BaseTransport, path: str, pages: int = 1) -> None:
        self.through = through
        self.path = path
        self.pages = pages

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == self.path and self.pages > 0:
            self.pages -= 1
            return httpx.Response(200, html="<html>Sign in to the cafe's wifi</html>")
        return self.through.handle_request(request)


def test_a_portal_page_instead_of_a_new_session_is_retried(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    """(red when any 2xx counts: a bare JSONDecodeError from reading the page as a session)"""
    events: list[RetryEvent] = []
    portal = CaptivePortal(wire, "/api/v1/diner-sessions/")
    client = make_client(client_server.url, transport=portal, on_retry=events.append)

    placed = client.place_order(shop.order_body())

    assert portal.pages == 0
    assert isinstance(events[0].error, NetworkError) and "not the API's" in str(events[0].error)
    assert (placed.status, placed.replayed) == (201, False)
    assert shop.orders_of(client.session().diner_id) == 1


class ReplacingTransport(RecordingTransport):
    """Before the first request to ``path``, another client on the storage stores a session
    of its own (``replace``): the request goes out with the session it read before that."""

    def __init__(self, path: str, replace) -> None:
        super().__init__()
        self.path, self.replace = path, replace

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == self.path and self.replace is not None:
            replace, self.replace = self.replace, None
            replace()
        return super().handle_request(request)


def test_a_401_to_an_older_session_keeps_the_newer_one_stored(
    client_server: LiveServer, shop: Shop, make_client
) -> None:
    """A call sent with a session another client on the storage has replaced meanwhile (the
    old one revoked, a new guest opened) is refused 401: that forgets the old session, not the
    new one (red: the new guest's session was deleted, and its next call opened a third)."""
    storage = MemoryStorage()
    other = make_client(client_server.url, storage=MemoryStorage())
    newer = json.dumps(other.session().__dict__)
    session_entry = "ordering-client:" + shop.publishable_key.partition(".")[0] + ":session"

    def another_client_replaces_the_session() -> None:
        storage.set(session_entry, newer)

    transport = ReplacingTransport("/api/v1/orders/", another_client_replaces_the_session)
    client = make_client(client_server.url, storage=storage, transport=transport)
    old_diner = client.session().diner_id
    revoke_sessions(client_server, shop, old_diner)

    with pytest.raises(ApiError) as refused:
        client.orders()

    assert refused.value.status == 401
    assert storage.get(session_entry) == newer
    assert client.session().diner_id == json.loads(newer)["diner_id"]
