"""Diner sessions through the API: opening, the token's binding, refresh, sign-out, revocation,
and what each credential may do (the capability table)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from typing import Any

import jsonschema_rs
import pytest
import redis
from django.contrib.admin.models import LogEntry
from django.core import signing
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from idempotency.models import IdempotencyRecord
from ordering.models import Order, OrderStatus
from tenants import credential_cache, session_state
from tenants.api_keys import issue_api_key, revoke_api_key
from tenants.diner_sessions import _SALT, SessionRefused, read_token
from tenants.models import ApiClient, DinerSession
from tenants.permissions import CAPABILITIES, Capability
from tenants.principals import CredentialKind
from tests.conftest import api_for
from tests.support.auth import with_auth

pytestmark = pytest.mark.django_db
SESSIONS = "/api/v1/diner-sessions/"


@pytest.fixture
def publishable(tenant: Any) -> tuple[ApiClient, str]:
    return issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)


@pytest.fixture
def merchant(tenant: Any) -> tuple[ApiClient, str]:
    return issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)


def open_guest(key: str) -> Any:
    return with_auth(f"Api-Key {key}").post(SESSIONS, format="json")


def as_diner(token: str) -> APIClient:
    return with_auth(f"Bearer {token}")


def place(api: APIClient, menu: dict, key: str | None = None, quantity: int = 1) -> Any:
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": quantity}],
        "payment_method": "card",
    }
    return api.post(
        "/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex
    )


# --- opening --------------------------------------------------------------------------------


def test_publishable_key_and_empty_body_open_a_guest_session(publishable: Any, menu: Any) -> None:
    r = open_guest(publishable[1])
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"token", "diner_id", "expires_at"}
    assert body["diner_id"].startswith("guest_") and len(body["diner_id"]) > 20
    expires = timezone.datetime.fromisoformat(body["expires_at"])
    assert timedelta(hours=23, minutes=59) < expires - timezone.now() <= timedelta(hours=24)
    session = DinerSession.objects.get()
    assert (session.diner_id, session.client, session.is_guest) == (
        body["diner_id"],
        publishable[0],
        True,
    )
    # the token is not stored: only the hash of its secret part
    claims = read_token(body["token"])
    assert body["token"] not in str(vars(session)) and claims.secret not in session.secret_hash
    assert place(as_diner(body["token"]), menu).json()["diner_id"] == body["diner_id"]
    # two guests are two diners
    assert open_guest(publishable[1]).json()["diner_id"] != body["diner_id"]


@pytest.mark.parametrize("kind", ["guest", "signed-in"])
def test_a_new_session_s_token_opens_until_the_expiry_its_answer_gives(
    publishable: Any, merchant: Any, monkeypatch: Any, kind: str
) -> None:
    """The token carries its expiry in whole seconds; the answer (and the session's row)
    gave the instant with its fraction of a second, so a token opened at .75 s was refused
    as expired three quarters of a second before the time its answer named (red: refused
    at ``expires_at`` - 1 ms)."""
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now().replace(microsecond=750_000))
    if kind == "guest":
        opened = open_guest(publishable[1])
    else:
        opened = with_auth(f"Api-Key {merchant[1]}").post(
            SESSIONS, {"diner_id": "alice"}, format="json"
        )
    monkeypatch.undo()
    assert opened.status_code == 201
    body = opened.json()
    expires_at = timezone.datetime.fromisoformat(body["expires_at"])
    assert (
        read_token(body["token"], now=expires_at.timestamp() - 0.001).diner_id == body["diner_id"]
    )
    with pytest.raises(SessionRefused) as refused:
        read_token(body["token"], now=expires_at.timestamp())
    assert refused.value.code == "SESSION_EXPIRED"
    assert DinerSession.objects.get().expires_at == expires_at


def test_merchant_key_signs_in_the_named_diner(merchant: Any, menu: Any) -> None:
    r = with_auth(f"Api-Key {merchant[1]}").post(SESSIONS, {"diner_id": "alice"}, format="json")
    assert r.status_code == 201 and r.json()["diner_id"] == "alice"
    assert place(as_diner(r.json()["token"]), menu).json()["diner_id"] == "alice"
    assert DinerSession.objects.get().is_guest is False


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param({}, 400, "VALIDATION_ERROR", id="merchant-without-diner"),
        pytest.param({"diner_id": "bad id!"}, 400, "VALIDATION_ERROR", id="bad-diner-id"),
        pytest.param({"diner_id": "x" * 65}, 400, "VALIDATION_ERROR", id="too-long"),
        pytest.param({"diner_id": 1}, 400, "VALIDATION_ERROR", id="a-number"),  # red: "1"
        pytest.param({"diner_id": "guest_abc"}, 400, "VALIDATION_ERROR", id="reserved-guest"),
        # spaces are no diner id's characters: "alice " signed in alice (red: 201, diner
        # "alice"), whose orders another person of the backend's could then read
        pytest.param({"diner_id": "alice "}, 400, "VALIDATION_ERROR", id="trailing-space"),
        pytest.param({"diner_id": "\talice"}, 400, "VALIDATION_ERROR", id="leading-tab"),
        # Python's "$" matches before a final line break: "alice\n" signed in a diner no
        # erasure can name (red: 201, diner "alice\n")
        pytest.param({"diner_id": "alice\n"}, 400, "VALIDATION_ERROR", id="trailing-newline"),
        # an erasure's pseudonym: its orders would be a live diner's again (red: 201)
        pytest.param(
            {"diner_id": "erased-9183c7c73c5b7af0"}, 400, "VALIDATION_ERROR", id="reserved-erased"
        ),
    ],
)
def test_merchant_sign_in_needs_a_valid_diner_id(
    merchant: Any, body: dict, status: int, code: str
) -> None:
    r = with_auth(f"Api-Key {merchant[1]}").post(SESSIONS, body, format="json")
    assert (r.status_code, r.json()["code"]) == (status, code)
    assert DinerSession.objects.count() == 0


@pytest.mark.parametrize(
    "diner_id",
    [
        "alice",
        "a.b:c@d-e_f",
        "Guest_x",
        "guest",
        "guest_abc",
        "erased-9183c7c73c5b7af0",
        "x" * 65,
        "alice\n",
    ],
)
def test_the_schema_s_diner_id_pattern_admits_what_a_sign_in_takes(
    client: Any, merchant: Any, diner_id: str
) -> None:
    # The pattern declared the characters and length only: "guest_…" and "erased-…" matched it
    # and were refused (400), so a client generated from the schema could send them.
    schema = client.get("/api/schema/", {"format": "json"}).json()
    declared = schema["components"]["schemas"]["OpenSessionIn"]["properties"]["diner_id"]
    admitted = jsonschema_rs.validator_for(declared).is_valid(diner_id)
    r = with_auth(f"Api-Key {merchant[1]}").post(SESSIONS, {"diner_id": diner_id}, format="json")
    assert (r.status_code == 201) == admitted, (diner_id, declared, r.status_code)


def test_publishable_key_cannot_name_a_diner(publishable: Any) -> None:
    r = with_auth(f"Api-Key {publishable[1]}").post(SESSIONS, {"diner_id": "alice"}, format="json")
    assert (r.status_code, r.json()["code"]) == (403, "PERMISSION_DENIED")
    assert DinerSession.objects.count() == 0


def test_a_session_cannot_open_sessions(api: Any) -> None:
    r = api.post(SESSIONS, format="json")
    assert (r.status_code, r.json()["code"]) == (403, "PERMISSION_DENIED")


# --- what a publishable key may do ---------------------------------------------------------


def test_publishable_key_alone_reaches_no_order_data(
    publishable: Any, api: Any, menu: Any, tenant: Any
) -> None:
    order_id = place(api, menu).json()["id"]
    app = with_auth(f"Api-Key {publishable[1]}")
    assert app.get("/api/v1/menu/").status_code == 200
    attempts = {
        "list": app.get("/api/v1/orders/"),
        "read": app.get(f"/api/v1/orders/{order_id}/"),
        "create": place(app, menu),
        "pay": app.post(f"/api/v1/orders/{order_id}/pay/"),
        "cancel": app.post(f"/api/v1/orders/{order_id}/cancel/"),
        "move": app.post(
            f"/api/v1/orders/{order_id}/transition/", {"to": "CANCELLED"}, format="json"
        ),
        "tokens": app.post("/api/v1/idempotency-tokens/", {"count": 1}, format="json"),
        "check-tokens": app.post(
            "/api/v1/idempotency-tokens/check/", {"tokens": ["tok_x"]}, format="json"
        ),
        "revoke-diner": app.post("/api/v1/diners/diner-1/revoke-sessions/"),
        "refresh": app.post(f"{SESSIONS}refresh/"),
    }
    assert {name: (r.status_code, r.json()["code"]) for name, r in attempts.items()} == {
        name: (403, "PERMISSION_DENIED") for name in attempts
    }
    assert Order.objects.for_tenant(tenant).get(pk=order_id).status == OrderStatus.CREATED
    assert Order.all_tenants.count() == 1


def test_a_spoofed_x_diner_id_grants_nothing(
    publishable: Any, api: Any, merchant_api: Any, menu: Any, tenant: Any
) -> None:
    mine = place(api, menu).json()["id"]  # diner-1's order
    spoofed = {"HTTP_X_DINER_ID": "diner-1"}
    app = with_auth(f"Api-Key {publishable[1]}")
    assert app.get("/api/v1/orders/", **spoofed).status_code == 403
    # another diner's session naming diner-1 still sees only its own orders
    other = api_for(tenant, diner="diner-2")
    assert other.get("/api/v1/orders/", **spoofed).json()["results"] == []
    r = other.post(f"/api/v1/orders/{mine}/cancel/", **spoofed)
    assert (r.status_code, r.json()["code"]) == (404, "ORDER_NOT_FOUND")
    placed = place(api_for(tenant, diner="diner-2"), menu)
    assert placed.json()["diner_id"] == "diner-2"
    # a merchant key does not become a diner either: it still may not place or pay
    assert place(merchant_api, menu).status_code == 403
    assert merchant_api.post(f"/api/v1/orders/{mine}/pay/", **spoofed).status_code == 403
    assert Order.objects.for_tenant(tenant).get(pk=mine).status == OrderStatus.CREATED


def test_every_capability_is_held_as_the_table_says() -> None:
    """The table is the policy; this pins it so a change to it is a visible, reviewed diff."""
    assert CAPABILITIES[CredentialKind.PUBLISHABLE] == {
        Capability.READ_MENU,
        Capability.OPEN_GUEST_SESSION,
    }
    assert Capability.PLACE_ORDER not in CAPABILITIES[CredentialKind.MERCHANT]
    assert Capability.SEE_INTERNAL_FIELDS not in CAPABILITIES[CredentialKind.DINER_SESSION]


def test_every_api_view_declares_its_capabilities() -> None:
    """A method without a declaration is refused to everyone; every routed API method has one."""
    from django.urls import get_resolver

    from tenants.permissions import declared_capabilities

    undeclared = []

    def walk(patterns: Any, prefix: str = "") -> None:
        for p in patterns:
            if hasattr(p, "url_patterns"):
                walk(p.url_patterns, prefix + str(p.pattern))
                continue
            view = getattr(p.callback, "cls", None)
            path = prefix + str(p.pattern)
            if view is None or not path.startswith("api/v1/") or "callback" in path:
                continue
            for method in ("get", "post", "put", "patch", "delete"):
                if hasattr(view, method) and not declared_capabilities(view, method.upper()):
                    undeclared.append(f"{method.upper()} {path}")

    walk(get_resolver().url_patterns)
    assert undeclared == []


# --- the token: signature, expiry, binding --------------------------------------------------


def forge(**claims: Any) -> str:
    return signing.Signer(salt=_SALT, algorithm="sha256").sign_object(claims)


def claims_of(token: str) -> dict:
    return signing.Signer(salt=_SALT, algorithm="sha256").unsign_object(token)


def assert_401(client: APIClient, code: str) -> None:
    r = client.get("/api/v1/orders/")
    assert (r.status_code, r.json()["code"]) == (401, code), r.content
    assert r["WWW-Authenticate"] == "Bearer"


def test_forged_tampered_and_rebound_tokens_are_401(
    publishable: Any, other_tenant: Any, settings: Any
) -> None:
    token = open_guest(publishable[1]).json()["token"]
    assert as_diner(token).get("/api/v1/orders/").status_code == 200
    claims = claims_of(token)
    other_session = DinerSession.objects.create(
        tenant=other_tenant,
        diner_id=claims["d"],
        client=issue_api_key(tenant=other_tenant, name="app")[0],
        secret_hash=DinerSession.objects.get().secret_hash,
        expires_at=timezone.now() + timedelta(hours=1),
    )
    rebound = {
        # valid signatures (made with the server's own key) over claims that do not match the
        # session: another tenant, another diner, another secret, another tenant's session
        "other-tenant": {**claims, "t": other_tenant.pk},
        "other-diner": {**claims, "d": "diner-1"},
        "other-secret": {**claims, "k": "A" * 22},
        "other-tenants-session": {**claims, "s": other_session.pk.hex},
        "unknown-session": {**claims, "s": uuid.uuid4().hex},
    }
    for forged_claims in rebound.values():
        assert_401(as_diner(forge(**forged_claims)), "SESSION_INVALID")
    payload, mac = token.rsplit(":", 1)
    tampered = [
        f"{payload}:{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}",  # another signature
        f"{payload[:-2]}xx:{mac}",  # another payload
        token[:40],
        "x" * 600,
        signing.Signer(key="another-key", salt=_SALT, algorithm="sha256").sign_object(claims),
    ]
    for bad in tampered:
        assert_401(as_diner(bad), "SESSION_INVALID")


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"e": float("inf")}, id="expiry-Infinity"),  # int() raises OverflowError
        pytest.param({"e": float("-inf")}, id="expiry-minus-Infinity"),
        pytest.param({"e": float("nan")}, id="expiry-NaN"),
        pytest.param({"t": float("inf")}, id="tenant-Infinity"),
        pytest.param({"s": 12345}, id="session-id-a-number"),  # UUID(hex=...) AttributeError
        pytest.param({"e": "soon"}, id="expiry-text"),
    ],
)
def test_signed_claims_no_session_can_hold_are_401(publishable: Any, changes: dict) -> None:
    """Only the signing key can make these (robustness, not a forgery): still no 500."""
    token = open_guest(publishable[1]).json()["token"]
    assert_401(as_diner(forge(**{**claims_of(token), **changes})), "SESSION_INVALID")


def test_an_expired_token_is_401(publishable: Any, settings: Any) -> None:
    settings.DINER_SESSION_TTL_SECONDS = 1
    token = open_guest(publishable[1]).json()["token"]
    assert as_diner(token).get("/api/v1/orders/").status_code == 200  # verified, remembered
    time.sleep(1.1)
    assert_401(as_diner(token), "SESSION_EXPIRED")
    # and an expired token cannot be refreshed
    r = as_diner(token).post(f"{SESSIONS}refresh/")
    assert (r.status_code, r.json()["code"]) == (401, "SESSION_EXPIRED")


def test_secret_key_rotation_keeps_sessions_while_the_old_key_is_a_fallback(
    publishable: Any, settings: Any
) -> None:
    token = open_guest(publishable[1]).json()["token"]
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-secret-key-for-the-test", [old]
    assert as_diner(token).get("/api/v1/orders/").status_code == 200
    settings.SECRET_KEY_FALLBACKS = []
    assert_401(as_diner(token), "SESSION_INVALID")


# --- refresh, sign-out, revocation ---------------------------------------------------------


def test_refresh_extends_the_same_session_and_keeps_the_diner(
    publishable: Any, settings: Any, menu: Any
) -> None:
    settings.DINER_SESSION_TTL_SECONDS = 3600
    opened = open_guest(publishable[1]).json()
    order = place(as_diner(opened["token"]), menu, key="k1")
    settings.DINER_SESSION_TTL_SECONDS = 7200
    refreshed = as_diner(opened["token"]).post(f"{SESSIONS}refresh/")
    assert refreshed.status_code == 200
    body = refreshed.json()
    assert body["diner_id"] == opened["diner_id"] and body["token"] != opened["token"]
    assert read_token(body["token"]).expires_at > read_token(opened["token"]).expires_at
    assert DinerSession.objects.count() == 1
    assert DinerSession.objects.get().expires_at == timezone.datetime.fromisoformat(
        body["expires_at"]
    )
    # the refreshed token replays the first token's retry: the scope is the diner
    again = place(as_diner(body["token"]), menu, key="k1")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == order.content
    # the old token stays valid until its own expiry (a lost refresh answer can be retried)
    assert as_diner(opened["token"]).get("/api/v1/orders/").status_code == 200


def test_refresh_never_passes_the_sessions_max_age(publishable: Any, settings: Any) -> None:
    settings.DINER_SESSION_MAX_AGE_SECONDS = 600
    token = open_guest(publishable[1]).json()["token"]
    session = DinerSession.objects.get()
    refreshed = as_diner(token).post(f"{SESSIONS}refresh/").json()
    assert (
        read_token(refreshed["token"]).expires_at
        <= (session.created_at + timedelta(seconds=600)).timestamp()
    )
    DinerSession.objects.update(created_at=timezone.now() - timedelta(seconds=601))
    r = as_diner(token).post(f"{SESSIONS}refresh/")
    assert (r.status_code, r.json()["code"]) == (401, "SESSION_EXPIRED")


@pytest.mark.parametrize("kind", ["guest", "signed-in"])
def test_a_new_session_s_token_never_passes_its_max_age(
    publishable: Any, merchant: Any, settings: Any, kind: str
) -> None:
    """Both settings can be set to any length: with a token lifetime longer than the max age
    (a year and 30 days), a new session's first token lived the whole year, though no refresh
    may take a token past the max age."""
    settings.DINER_SESSION_TTL_SECONDS = 365 * 86400
    settings.DINER_SESSION_MAX_AGE_SECONDS = 600
    if kind == "guest":
        opened = open_guest(publishable[1])
    else:
        opened = with_auth(f"Api-Key {merchant[1]}").post(
            SESSIONS, {"diner_id": "alice"}, format="json"
        )
    assert opened.status_code == 201
    session = DinerSession.objects.get()
    limit = (session.created_at + timedelta(seconds=600)).timestamp()

    assert read_token(opened.json()["token"]).expires_at <= limit
    assert session.expires_at.timestamp() <= limit
    assert timezone.datetime.fromisoformat(opened.json()["expires_at"]).timestamp() <= limit


def test_sign_out_ends_only_that_session(publishable: Any, tenant: Any) -> None:
    mine = open_guest(publishable[1]).json()["token"]
    theirs = open_guest(publishable[1]).json()["token"]
    r = as_diner(mine).post(f"{SESSIONS}end/")
    assert r.status_code == 204
    assert_401(as_diner(mine), "SESSION_REVOKED")
    assert (as_diner(mine).post(f"{SESSIONS}refresh/").status_code) == 401
    assert as_diner(theirs).get("/api/v1/orders/").status_code == 200


def test_merchant_revokes_every_session_of_a_diner(merchant: Any, tenant: Any) -> None:
    backend = with_auth(f"Api-Key {merchant[1]}")
    alice = [backend.post(SESSIONS, {"diner_id": "alice"}, format="json").json()["token"]]
    alice.append(backend.post(SESSIONS, {"diner_id": "alice"}, format="json").json()["token"])
    bob = backend.post(SESSIONS, {"diner_id": "bob"}, format="json").json()["token"]
    r = backend.post("/api/v1/diners/alice/revoke-sessions/")
    assert r.status_code == 200 and r.json() == {"revoked": 2}
    for token in alice:
        assert_401(as_diner(token), "SESSION_REVOKED")
    assert as_diner(bob).get("/api/v1/orders/").status_code == 200
    assert backend.post("/api/v1/diners/alice/revoke-sessions/").json() == {"revoked": 0}
    # a new sign-in after the revocation works
    again = backend.post(SESSIONS, {"diner_id": "alice"}, format="json").json()["token"]
    assert as_diner(again).get("/api/v1/orders/").status_code == 200


def test_session_writes_ignore_an_idempotency_key_and_keep_no_reply(
    merchant: Any, tenant: Any
) -> None:
    """docs/idempotency.md: these writes are safe to repeat as they are; their answers carry
    credentials, which no stored reply may hold. The same key twice opens two sessions, and
    revoking twice revokes once."""
    backend = with_auth(f"Api-Key {merchant[1]}")
    key = {"HTTP_IDEMPOTENCY_KEY": "same-key"}
    opened = [backend.post(SESSIONS, {"diner_id": "alice"}, format="json", **key) for _ in range(2)]
    assert [r.status_code for r in opened] == [201, 201]
    assert opened[0].json()["token"] != opened[1].json()["token"]
    revoked = [backend.post("/api/v1/diners/alice/revoke-sessions/", **key) for _ in range(2)]
    assert [r.json() for r in revoked] == [{"revoked": 2}, {"revoked": 0}]
    for answer in (*opened, *revoked):
        assert "X-Idempotent-Result" not in answer
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize(
    "diner_id",
    [
        pytest.param("a%20b", id="space"),
        pytest.param("x" * 65, id="65-characters"),
        pytest.param("%C3%A9", id="non-ascii"),
        pytest.param("a/b", id="slash"),
        pytest.param("al!ce", id="punctuation"),
        pytest.param("alice%0A", id="trailing-newline"),
    ],
)
def test_revoking_a_malformed_diner_id_is_a_validation_error(
    merchant: Any, tenant: Any, diner_id: str
) -> None:
    """README's errors: bad input is 400 VALIDATION_ERROR naming the field, not 404 NOT_FOUND
    (no such route), which a backend could take for "nothing to revoke"."""
    backend = with_auth(f"Api-Key {merchant[1]}")
    alice = backend.post(SESSIONS, {"diner_id": "alice"}, format="json").json()["token"]

    r = backend.post(f"/api/v1/diners/{diner_id}/revoke-sessions/")

    assert r.status_code == 400, r.content
    assert r.json()["code"] == "VALIDATION_ERROR"
    assert set(r.json()["errors"]) == {"diner_id"}
    assert DinerSession.objects.filter(revoked_at__isnull=False).count() == 0
    assert as_diner(alice).get("/api/v1/orders/").status_code == 200


def test_another_tenants_merchant_revokes_nothing_here(
    merchant: Any, other_tenant: Any, tenant: Any
) -> None:
    token = (
        with_auth(f"Api-Key {merchant[1]}")
        .post(SESSIONS, {"diner_id": "alice"}, format="json")
        .json()["token"]
    )
    theirs = api_for(other_tenant, kind="merchant")
    assert theirs.post("/api/v1/diners/alice/revoke-sessions/").json() == {"revoked": 0}
    assert as_diner(token).get("/api/v1/orders/").status_code == 200


def test_revoking_the_key_that_opened_sessions_ends_them(
    publishable: Any, merchant: Any, tenant: Any
) -> None:
    guest = open_guest(publishable[1]).json()["token"]
    signed_in = (
        with_auth(f"Api-Key {merchant[1]}")
        .post(SESSIONS, {"diner_id": "alice"}, format="json")
        .json()["token"]
    )
    revoke_api_key(client=publishable[0])
    assert_401(as_diner(guest), "SESSION_REVOKED")
    assert as_diner(signed_in).get("/api/v1/orders/").status_code == 200
    revoke_api_key(client=merchant[0])
    assert_401(as_diner(signed_in), "SESSION_REVOKED")


def test_a_suspended_tenant_refuses_its_sessions(publishable: Any, tenant: Any) -> None:
    token = open_guest(publishable[1]).json()["token"]
    tenant.status = tenant.Status.SUSPENDED
    tenant.save()
    session_state.clear()
    r = as_diner(token).get("/api/v1/orders/")
    assert (r.status_code, r.json()["code"]) == (403, "TENANT_SUSPENDED")


# --- the cost of verifying a session --------------------------------------------------------


def test_verifying_a_session_is_one_cached_read_and_never_a_write(
    publishable: Any, settings: Any
) -> None:
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 60
    token = open_guest(publishable[1]).json()["token"]
    diner = as_diner(token)
    with CaptureQueriesContext(connection) as first:
        assert diner.get("/api/v1/menu/").status_code == 200
    with CaptureQueriesContext(connection) as second:
        assert diner.get("/api/v1/menu/").status_code == 200
    auth = [q["sql"] for q in first.captured_queries if "tenants_" in q["sql"]]
    assert len(auth) == 1 and auth[0].startswith("SELECT") and "tenants_dinersession" in auth[0]
    assert [q["sql"] for q in second.captured_queries if "tenants_" in q["sql"]] == []
    writes = [
        q["sql"]
        for q in first.captured_queries + second.captured_queries
        if not q["sql"].startswith("SELECT")
    ]
    assert writes == []


def test_an_announced_revocation_drops_the_cached_state_at_once(
    publishable: Any, settings: Any
) -> None:
    """Another process revokes and announces it (here: the row is updated behind this
    process's back and the announcement published on a client of its own)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 60  # only the announcement can end it early
    assert _feed_heard()
    token = open_guest(publishable[1]).json()["token"]
    diner = as_diner(token)
    assert diner.get("/api/v1/orders/").status_code == 200  # cached now
    session = DinerSession.objects.get()
    DinerSession.objects.update(revoked_at=timezone.now())
    assert diner.get("/api/v1/orders/").status_code == 200  # still the cached state
    other = redis.Redis.from_url(settings.REDIS_URL)
    other.publish(credential_cache.CHANNEL, credential_cache.session_key(session.pk))
    other.close()
    deadline = time.monotonic() + 10  # the machine may be busy: a generous wait
    while diner.get("/api/v1/orders/").status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert_401(diner, "SESSION_REVOKED")


def _feed_heard(timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while credential_cache.feed.subscription() is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_without_the_feed_a_revocation_made_elsewhere_is_seen_within_the_short_bound(
    publishable: Any, settings: Any
) -> None:
    """Another process revokes and its announcement is lost: here the row is updated behind
    this process's back, and this process hears no feed (as with Redis down)."""
    credential_cache.feed.stop()
    settings.REDIS_NODE_ALIASES = []  # the feed cannot start again during the test
    bound = 1.0
    settings.DINER_SESSION_STATE_CACHE_SECONDS = bound
    token = open_guest(publishable[1]).json()["token"]
    diner = as_diner(token)
    assert diner.get("/api/v1/orders/").status_code == 200  # cached now
    revoked_at = time.monotonic()
    DinerSession.objects.update(revoked_at=timezone.now())
    stale = diner.get("/api/v1/orders/")
    if time.monotonic() - revoked_at < bound:  # a slow machine may already be past the bound
        assert stale.status_code == 200  # served from this process's cache: no query
    time.sleep(bound + 0.05)
    assert_401(diner, "SESSION_REVOKED")


# --- opening is rate limited per address and per key --------------------------------------


def test_guest_sessions_are_limited_per_client_address_then_per_key(
    publishable: Any, settings: Any
) -> None:
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    settings.DINER_SESSION_OPEN_RATE_PER_KEY = 3
    app = with_auth(f"Api-Key {publishable[1]}")

    def from_address(address: str) -> int:
        return app.post(SESSIONS, format="json", REMOTE_ADDR=address).status_code

    assert [from_address("10.0.0.1") for _ in range(3)] == [201, 201, 429]
    # another address has its own budget, but all addresses share the key's
    assert [from_address("10.0.0.2") for _ in range(2)] == [201, 429]
    refused = app.post(SESSIONS, format="json", REMOTE_ADDR="10.0.0.3")
    assert (refused.status_code, refused.json()["code"]) == (429, "RATE_LIMITED")
    assert int(refused["Retry-After"]) >= 1
    assert DinerSession.objects.count() == 3
    # another publishable key of the tenant has its own
    _, other_key = issue_api_key(tenant=publishable[0].tenant, name="kiosk")
    assert open_guest(other_key).status_code == 201


def test_the_schema_says_why_opening_a_session_answers_429(publishable: Any, settings: Any) -> None:
    # A guest session is refused 429 by the limits on opening them (per client address, then
    # per publishable key), a merchant's sign-in by its key's write limit: the schema's 429
    # named the write rate limit alone, so an app developer looked for writes the app made.
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 1
    app = with_auth(f"Api-Key {publishable[1]}")
    assert app.post(SESSIONS, format="json", REMOTE_ADDR="10.0.0.1").status_code == 201
    refused = app.post(SESSIONS, format="json", REMOTE_ADDR="10.0.0.1")
    assert (refused.status_code, refused.json()["code"]) == (429, "RATE_LIMITED")

    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    described = schema["paths"][SESSIONS]["post"]["responses"]["429"]["description"]
    assert "guest sessions" in described, described
    assert "client address" in described and "publishable key" in described, described
    assert "sign-in" in described, described


@pytest.mark.parametrize("method", ["get", "put", "delete", "options"])
def test_a_method_that_opens_no_session_costs_no_guest_session(
    publishable: Any, settings: Any, method: str
) -> None:
    # given a budget of one guest session per address
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 1
    app = with_auth(f"Api-Key {publishable[1]}")
    # when the app sends the sessions route methods it does not answer
    for _ in range(3):
        r = getattr(app, method)(SESSIONS, REMOTE_ADDR="10.0.0.1")
        # red: 405, then 429 "Too many guest sessions opened from this address" (none was)
        assert (r.status_code, r.json()["code"]) == (405, "METHOD_NOT_ALLOWED")
    # then the address still opens its one session
    assert app.post(SESSIONS, format="json", REMOTE_ADDR="10.0.0.1").status_code == 201
    assert DinerSession.objects.count() == 1


def test_a_refused_session_says_which_budget_of_guest_sessions_ran_out(
    publishable: Any, settings: Any
) -> None:
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 1
    settings.DINER_SESSION_OPEN_RATE_PER_KEY = 2
    app = with_auth(f"Api-Key {publishable[1]}")

    def refusal(address: str) -> str:
        answer = app.post(SESSIONS, format="json", REMOTE_ADDR=address)
        return answer.json()["detail"] if answer.status_code == 429 else ""

    assert refusal("10.0.0.1") == ""
    # red: "Too many writes: the limit is 1 per window; ..." (no write was made)
    assert refusal("10.0.0.1").startswith(
        "Too many guest sessions opened from this address: the limit is 1 per window; retry in "
    )
    assert refusal("10.0.0.2") == ""
    # red: "Too many writes: this tenant's ceiling is 2 per window; ..." (it is the key's)
    assert refusal("10.0.0.3").startswith(
        "Too many guest sessions opened with this key: the limit is 2 per window; retry in "
    )


def test_an_address_s_budget_is_each_restaurant_s_own(
    publishable: Any, make_tenant: Any, settings: Any
) -> None:
    # sessions are the restaurant's rows: one restaurant's guests from an address do not use
    # up another's (docs/tenancy.md)
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    _, theirs = issue_api_key(tenant=make_tenant("other"), name="app")
    ours = with_auth(f"Api-Key {publishable[1]}")
    other = with_auth(f"Api-Key {theirs}")
    assert [ours.post(SESSIONS, REMOTE_ADDR="10.0.0.1").status_code for _ in range(3)] == [
        201,
        201,
        429,
    ]
    assert other.post(SESSIONS, REMOTE_ADDR="10.0.0.1").status_code == 201


def test_a_merchant_sign_in_counts_as_its_write(merchant: Any, settings: Any) -> None:
    from idempotency.core.ratelimit import reset_rate_cache

    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "RATE_LIMIT_PER_MINUTE": 2}
    reset_rate_cache()
    backend = with_auth(f"Api-Key {merchant[1]}")
    statuses = [
        backend.post(SESSIONS, {"diner_id": f"d{i}"}, format="json").status_code for i in range(3)
    ]
    assert statuses == [201, 201, 429]


def test_the_schema_lists_for_each_operation_the_credentials_that_reach_it(client: Any) -> None:
    schema = client.get("/api/schema/", {"format": "json"}).json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["ApiKey"]["type"] == "apiKey" and schemes["ApiKey"]["name"] == "Authorization"
    assert (schemes["Bearer"]["type"], schemes["Bearer"]["scheme"]) == ("http", "bearer")

    def security(path: str, method: str) -> list[str]:
        return sorted(name for req in schema["paths"][path][method]["security"] for name in req)

    assert security("/api/v1/menu/", "get") == ["ApiKey", "Bearer"]
    assert security("/api/v1/orders/", "post") == ["Bearer"]
    assert security("/api/v1/orders/", "get") == ["ApiKey", "Bearer"]  # merchant: every order
    assert security("/api/v1/orders/{order_id}/pay/", "post") == ["Bearer"]
    assert security("/api/v1/orders/{order_id}/transition/", "post") == ["ApiKey"]
    assert security("/api/v1/diner-sessions/", "post") == ["ApiKey"]
    assert security("/api/v1/diner-sessions/refresh/", "post") == ["Bearer"]
    assert "X-Diner-Id" not in json.dumps(schema)


def test_staff_end_sessions_in_the_admin_and_never_see_secret_hashes(
    admin_client: Any, publishable: Any
) -> None:
    token = open_guest(publishable[1]).json()["token"]
    session = DinerSession.objects.get()
    page = admin_client.get(f"/admin/tenants/dinersession/{session.pk}/change/")
    assert page.status_code == 200 and session.secret_hash not in page.content.decode()
    admin_client.post(
        "/admin/tenants/dinersession/",
        {"action": "end", "_selected_action": [str(session.pk)]},
    )
    assert_401(as_diner(token), "SESSION_REVOKED")
    # and the ended session's form changes nothing: its end cannot be cleared (red: the old
    # token worked again)
    admin_client.post(
        f"/admin/tenants/dinersession/{session.pk}/change/",
        {"revoked_at_0": "", "revoked_at_1": "", "diner_id": "someone-else"},
    )
    session.refresh_from_db()
    assert session.revoked_at is not None and session.diner_id != "someone-else"
    assert_401(as_diner(token), "SESSION_REVOKED")
    # the admin's action log names the session by its id, never its diner's: the log outlives
    # the diner's erasure (red: "<restaurant>:<diner id> (<id>)")
    logged = LogEntry.objects.filter(object_id=str(session.pk))
    assert {entry.object_repr for entry in logged} == {f"diner session {session.pk}"}


def test_a_diner_sees_no_internal_fields_and_a_merchant_key_sees_them(
    api: Any, merchant_api: Any, menu: Any
) -> None:
    placed = place(api, menu)
    order_id = placed.json()["id"]
    paid = api.post(f"/api/v1/orders/{order_id}/pay/").json()
    moved = merchant_api.post(
        f"/api/v1/orders/{order_id}/transition/", {"to": "CANCELLED"}, format="json"
    ).json()
    diner_views = [
        placed.json(),
        paid,
        api.get(f"/api/v1/orders/{order_id}/").json(),
        api.get("/api/v1/orders/").json()["results"][0],
    ]
    for view in diner_views:
        assert "provider_txn_id" not in (view["payment"] or {})
        assert all("actor" not in t for t in view.get("transitions", []))
        assert "api:" not in json.dumps(view)  # no key prefix anywhere
    merchant_views = [moved, merchant_api.get(f"/api/v1/orders/{order_id}/").json()]
    for view in merchant_views:
        assert view["payment"]["provider_txn_id"].startswith("sim_")
        assert [t["actor"] for t in view["transitions"]][-1].startswith("api:")
    listed = merchant_api.get("/api/v1/orders/").json()["results"][0]
    assert listed["payment"]["provider_txn_id"].startswith("sim_")
