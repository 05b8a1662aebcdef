"""Guests fill only their share of the tenant's write ceiling (tenants/ceiling_share.py): the
rest of each window stays the merchant's, on the same counter, over real Redis."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from idempotency.core.ratelimit import reset_rate_cache
from ordering.models import Order, OrderStatus
from tenants.api_keys import issue_api_key
from tenants.ceiling_share import ceiling_share_of
from tenants.diner_sessions import open_session
from tenants.models import ApiClient
from tenants.principals import ApiPrincipal, CredentialKind
from tests.support.auth import with_auth

pytestmark = pytest.mark.django_db
SESSIONS = "/api/v1/diner-sessions/"
TOKENS = "/api/v1/idempotency-tokens/"


@pytest.fixture
def small_ceiling(settings: Any, tenant: Any) -> int:
    """A ceiling of 10 writes a minute for the tenant; guests may fill 0.8 of it."""
    settings.API_GUEST_CEILING_SHARE = 0.8
    tenant.write_ceiling_per_minute = 10
    tenant.save(update_fields=["write_ceiling_per_minute"])
    reset_rate_cache()
    yield 10
    reset_rate_cache()


def test_guests_fill_their_share_and_the_merchant_still_writes(
    small_ceiling: int, tenant: Any, menu: Any
) -> None:
    # given five guest sessions opened with the public key (one client address)
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    _, secret = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    guests = []
    for _ in range(5):
        opened = with_auth(f"Api-Key {publishable}").post(SESSIONS, format="json")
        assert opened.status_code == 201
        guests.append(with_auth(f"Bearer {opened.json()['token']}"))
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"}
    order = guests[0].post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="o1")
    assert order.status_code == 201
    Order.all_tenants.filter(pk=order.json()["id"]).update(status=OrderStatus.PAID)

    # when the guests keep writing (each far below its own 600 a minute)
    statuses = [guest.post(TOKENS, {"count": 1}, format="json") for guest in guests * 4]

    # then together they get 8 of the 10 (the order above was one), the rest refused
    assert [r.status_code for r in statuses].count(201) == 7
    refused = [r for r in statuses if r.status_code != 201]
    assert {r.status_code for r in refused} == {429}
    assert {r.json()["code"] for r in refused} == {"RATE_LIMITED"}
    assert all("ceiling is 8 " in r.json()["detail"] for r in refused)

    # and the merchant still moves the order and signs a diner in, up to the full ceiling
    merchant = with_auth(f"Api-Key {secret}")
    moved = merchant.post(
        f"/api/v1/orders/{order.json()['id']}/transition/", {"to": "ACCEPTED"}, format="json"
    )
    assert moved.status_code == 200 and moved.json()["status"] == "ACCEPTED"
    signed_in = merchant.post(SESSIONS, {"diner_id": "alice"}, format="json")
    assert signed_in.status_code == 201
    over = merchant.post(TOKENS, {"count": 1}, format="json")
    assert over.status_code == 429 and "ceiling is 10 " in over.json()["detail"]
    assert guests[1].post(TOKENS, {"count": 1}, format="json").status_code == 429


def test_a_guest_signs_out_while_other_guests_spend_the_share(
    small_ceiling: int, tenant: Any
) -> None:
    """Ending one's own session is never refused for what others wrote: whoever holds the
    public key could otherwise keep every guest of the restaurant from signing out (a shared
    device staying signed in as its last diner, orders and address in view) for as long as
    it writes. It needs no budget: once ended, the session's token is refused (401)."""
    # given guests who spent their whole share of the ceiling
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    tokens = [
        with_auth(f"Api-Key {publishable}").post(SESSIONS, format="json").json()["token"]
        for _ in range(2)
    ]
    spender, leaving = (with_auth(f"Bearer {token}") for token in tokens)
    statuses = [spender.post(TOKENS, {"count": 1}, format="json").status_code for _ in range(9)]
    assert statuses == [201] * 8 + [429]

    # when another guest signs out
    ended = leaving.post(f"{SESSIONS}end/")

    # then it is signed out, and its token opens nothing any more
    assert ended.status_code == 204
    refused = leaving.post(TOKENS, {"count": 1}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (401, "SESSION_REVOKED")


def test_a_signed_in_diner_is_not_held_to_the_guests_share(small_ceiling: int, tenant: Any) -> None:
    _, secret = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    signed_in = with_auth(f"Api-Key {secret}").post(SESSIONS, {"diner_id": "bob"}, format="json")
    bob = with_auth(f"Bearer {signed_in.json()['token']}")
    statuses = [bob.post(TOKENS, {"count": 1}, format="json").status_code for _ in range(10)]
    assert statuses == [201] * 9 + [429]  # the sign-in was the first of the 10


@pytest.mark.parametrize(
    ("kind", "guest_session", "expected"),
    [
        pytest.param(ApiClient.Kind.PUBLISHABLE, True, 0.25, id="guest-session"),
        pytest.param(ApiClient.Kind.PUBLISHABLE, False, 0.25, id="publishable-key"),
        pytest.param(ApiClient.Kind.MERCHANT, True, 1.0, id="signed-in-diner"),
        pytest.param(ApiClient.Kind.MERCHANT, False, 1.0, id="merchant-key"),
    ],
)
def test_the_share_follows_the_key_behind_the_credential(
    settings: Any, tenant: Any, kind: str, guest_session: bool, expected: float
) -> None:
    settings.API_GUEST_CEILING_SHARE = 0.25
    client, _ = issue_api_key(tenant=tenant, name="k", kind=kind)
    principal = ApiPrincipal(tenant=tenant, kind=CredentialKind(client.kind), client=client)
    if guest_session:
        diner = None if kind == ApiClient.Kind.PUBLISHABLE else "carol"
        session = open_session(client=client, diner_id=diner)
        principal = ApiPrincipal(
            tenant=tenant,
            kind=CredentialKind.DINER_SESSION,
            client=client,
            diner_id=session.diner_id,
            session_id=session.session_id,
        )
    assert ceiling_share_of(SimpleNamespace(user=principal)) == expected  # type: ignore[arg-type]


def test_a_dashboard_request_has_the_whole_ceiling() -> None:
    assert ceiling_share_of(SimpleNamespace(user=None, membership=object())) == 1.0  # type: ignore[arg-type]
