"""The Python client (clients/python) for a diner signed in to the restaurant's own backend,
against a live gunicorn: the backend opens the diner's session with the secret key
(docs/tenancy.md, "Diner sessions") and the app hands it to the client through
``session_provider``, which the client calls instead of opening a guest session."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ordering_client import (
    JsonFileStorage,
    MemoryStorage,
    OrderingClient,
    RetriesExhaustedError,
    RetryPolicy,
    Session,
    SessionChangedError,
)

from ordering.models import Order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.clients.conftest import Shop
from tests.clients.test_python_client import (
    FAST,
    ORDERS,
    RecordingTransport,
    expire_the_stored_session,
    revoke_sessions,
)
from tests.support.fault_proxy import DroppingProxy
from tests.support.live_server import LiveServer
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
OPEN = "/api/v1/diner-sessions/"


class Backend:
    """The restaurant's own backend: the diner signed in there, and it opens their ordering
    session with the restaurant's secret key. ``session`` is what the app's provider asks it
    for (here directly; an app reaches it over its own API and relays the answer)."""

    def __init__(self, server: LiveServer, shop: Shop) -> None:
        self._url = server.url
        _, self._secret_key = issue_api_key(
            tenant=shop.tenant, name="restaurant backend", kind=ApiClient.Kind.MERCHANT
        )
        self.diner_id = f"alice-{uuid.uuid4().hex[:8]}"
        self.opened: list[str] = []  # the diner of each session it opened

    def session(self) -> Session:
        answer = httpx.post(
            f"{self._url}{OPEN}",
            headers={"Authorization": f"Api-Key {self._secret_key}"},
            json={"diner_id": self.diner_id},
            timeout=DEADLINE_SECONDS,
        )
        assert answer.status_code == 201, answer.text
        self.opened.append(self.diner_id)
        return Session.from_answer(answer.json(), answer.headers)


@pytest.fixture
def backend(client_server: LiveServer, shop: Shop) -> Backend:
    return Backend(client_server, shop)


@pytest.fixture
def wire() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def make_client(shop: Shop, wire: RecordingTransport, backend: Backend) -> Iterator:
    made: list[OrderingClient] = []

    def make(base_url: str, **options) -> OrderingClient:
        options.setdefault("retry", FAST)
        options.setdefault("transport", wire)
        options.setdefault("session_provider", backend.session)
        client = OrderingClient(base_url, shop.publishable_key, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_signed_in_diner_orders_with_the_session_its_backend_opened(
    client_server: LiveServer, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """Red before ``session_provider``: the client could only open a guest session."""
    client = make_client(client_server.url)

    placed = client.place_order(shop.order_body(2))
    listed = client.orders()

    assert (placed.status, placed.replayed) == (201, False)
    assert client.session().diner_id == backend.diner_id
    assert shop.orders_of(backend.diner_id) == 1
    assert [o["id"] for o in listed["results"]] == [placed.json()["id"]]
    assert backend.opened == [backend.diner_id]  # asked once, then the stored session
    assert wire.posts(OPEN) == []  # no guest session
    client.end_session()  # the diner signs out of the app
    client.place_order(shop.order_body())
    assert len(backend.opened) == 2


def test_a_guest_session_stored_before_the_diner_signed_in_is_not_used(
    client_server: LiveServer, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """The app used a guest's client on its storage before the diner signed in: the client
    given the provider asks it rather than act as that guest (red: it placed the order as the
    guest, and would have refreshed the guest's session for up to 30 days)."""
    storage = MemoryStorage()
    guest = make_client(client_server.url, storage=storage, session_provider=None).session()

    client = make_client(client_server.url, storage=storage)
    placed = client.place_order(shop.order_body())

    assert guest.diner_id.startswith("guest_")
    assert client.session().diner_id == backend.diner_id
    assert shop.orders_of(backend.diner_id) == 1
    assert shop.orders_of(guest.diner_id) == 0
    assert (placed.status, placed.replayed) == (201, False)


def test_a_session_near_expiry_is_refreshed_and_the_provider_asked_once_it_expired(
    client_server: LiveServer, shop: Shop, backend: Backend, make_client, wire
) -> None:
    storage = MemoryStorage()
    client = make_client(client_server.url, storage=storage)
    client.place_order(shop.order_body())

    expire_the_stored_session(storage, in_seconds=60)
    client.place_order(shop.order_body(2))
    assert len(wire.posts("/api/v1/diner-sessions/refresh/")) == 1
    assert len(backend.opened) == 1

    expire_the_stored_session(storage)
    client.place_order(shop.order_body(3))
    assert len(backend.opened) == 2

    # a refresh refused (the diner's sessions revoked) asks the provider too
    revoke_sessions(client_server, shop, backend.diner_id)
    expire_the_stored_session(storage, in_seconds=60)
    client.place_order(shop.order_body(4))
    assert [e.status for e in wire.posts("/api/v1/diner-sessions/refresh/")] == [200, 401]
    assert len(backend.opened) == 3
    assert shop.orders_of(backend.diner_id) == 4
    assert wire.posts(OPEN) == []


def test_a_401_to_a_retry_asks_the_provider_and_the_retry_replays_as_the_same_diner(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """The answer is lost and the merchant revokes the diner's sessions before the retry: the
    provider's new session is the same diner's, whose key the server replays (red before
    ``session_provider``; a guest's client can only say SessionChangedError here)."""
    client = make_client(
        proxy.url, on_retry=lambda _: revoke_sessions(client_server, shop, backend.diner_id)
    )
    proxy.drop_responses(1, path=ORDERS)

    result = client.place_order(shop.order_body(2))

    assert [e.status for e in wire.posts()] == [None, 401, 201]
    assert len({e.key for e in wire.posts()}) == 1
    assert (result.status, result.replayed) == (201, True)
    assert result.body == proxy.dropped[0].body
    assert backend.opened == [backend.diner_id] * 2
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_key_is_not_resent_as_another_diner_the_provider_hands_over(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """The answer is lost, the diner's sessions are revoked, and the backend now has another
    diner signed in: the key is not sent as them (they would place the order again)."""
    first = backend.diner_id

    def revoke_and_switch(_: object) -> None:
        revoke_sessions(client_server, shop, first)
        backend.diner_id = "bob-" + first

    client = make_client(proxy.url, on_retry=revoke_and_switch)
    proxy.drop_responses(1, path=ORDERS)

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2))
    with pytest.raises(SessionChangedError) as again:
        client.place_order(shop.order_body(2))

    lost, refused = wire.posts()
    assert (lost.status, refused.status) == (None, 401)
    assert changed.value.idempotency_key == again.value.idempotency_key == lost.key
    assert (changed.value.previous_diner_id, changed.value.diner_id) == (first, "bob-" + first)
    assert len(wire.posts()) == 2
    assert shop.orders_of(first) == 1
    assert Order.objects.for_tenant(shop.tenant).count() == 1


def test_a_provider_handing_over_an_ended_session_gets_the_401_once(
    client_server: LiveServer, proxy: DroppingProxy, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """A provider that keeps handing over the session the merchant revoked: the request is
    sent once more with it, and that 401 is raised as a guest's client raises it (the key may
    have placed the order: SessionChangedError, kept), not asked again without end."""
    ended = backend.session()
    client = make_client(
        proxy.url,
        session_provider=lambda: ended,
        on_retry=lambda _: revoke_sessions(client_server, shop, backend.diner_id),
    )
    proxy.drop_responses(1, path=ORDERS)

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2))

    assert [e.status for e in wire.posts()] == [None, 401, 401]
    assert (changed.value.previous_diner_id, changed.value.diner_id) == (backend.diner_id, None)
    assert shop.orders_of(backend.diner_id) == 1


def test_a_401_to_a_key_s_first_attempt_then_another_diner_forgets_the_key(
    client_server: LiveServer, shop: Shop, backend: Backend, make_client, wire
) -> None:
    """The diner's sessions were revoked and the backend now has another diner signed in: the
    key's only attempt was refused (401) before anything ran, so the call says the session
    changed and forgets the key, and the next call places the order as the new diner."""
    client = make_client(client_server.url)
    first = client.session().diner_id
    revoke_sessions(client_server, shop, first)
    backend.diner_id = "bob-" + first

    with pytest.raises(SessionChangedError) as changed:
        client.place_order(shop.order_body(2))
    placed = client.place_order(shop.order_body(2))

    assert (changed.value.previous_diner_id, changed.value.diner_id) == (first, backend.diner_id)
    assert [e.status for e in wire.posts()] == [401, 201]
    assert (placed.status, placed.replayed) == (201, False)
    assert (shop.orders_of(first), shop.orders_of(backend.diner_id)) == (0, 1)


def test_a_restart_after_the_session_was_revoked_resumes_the_key_as_the_same_diner(
    client_server: LiveServer,
    proxy: DroppingProxy,
    shop: Shop,
    backend: Backend,
    make_client,
    wire,
    tmp_path: Path,
) -> None:
    """The app crashed mid-order and the diner's sessions were revoked before it restarted:
    the resumed key's 401 asks the provider, and the same diner's retry gets the replay."""
    path = tmp_path / "ordering-client.json"
    crashed = make_client(
        proxy.url, storage=JsonFileStorage(path), retry=RetryPolicy(max_attempts=1)
    )
    proxy.drop_responses(1, path=ORDERS)
    with pytest.raises(RetriesExhaustedError) as raised:
        crashed.place_order(shop.order_body(2))
    crashed.close()
    revoke_sessions(client_server, shop, backend.diner_id)

    restarted = make_client(client_server.url, storage=JsonFileStorage(path))
    result = restarted.place_order(shop.order_body(2))

    assert [e.status for e in wire.posts()] == [None, 401, 201]
    assert result.idempotency_key == raised.value.idempotency_key
    assert (result.status, result.replayed) == (201, True)
    assert shop.orders_of(backend.diner_id) == 1
    assert [k for k in json.loads(path.read_text()) if ":op:" in k] == []


def test_a_read_answered_401_asks_the_provider_and_reads_again(
    client_server: LiveServer, shop: Shop, backend: Backend, make_client, wire
) -> None:
    client = make_client(client_server.url)
    order_id = client.place_order(shop.order_body()).json()["id"]
    revoke_sessions(client_server, shop, backend.diner_id)

    order = client.order(order_id)

    assert order["id"] == order_id
    reads = [e.status for e in wire.log if e.method == "GET"]
    assert reads == [401, 200]
    assert len(backend.opened) == 2


def test_a_session_the_provider_cannot_give_is_its_error_and_nothing_is_sent(
    client_server: LiveServer, shop: Shop, make_client, wire
) -> None:
    class SignedOut(Exception):
        pass

    def signed_out() -> Session:
        raise SignedOut

    client = make_client(client_server.url, session_provider=signed_out)

    with pytest.raises(SignedOut):
        client.place_order(shop.order_body())

    assert wire.log == []
    assert Order.objects.for_tenant(shop.tenant).count() == 0
