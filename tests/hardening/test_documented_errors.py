"""The error tables of the docs are what the API answers: each row, produced against the app.

The tables are read from the docs themselves (README's "API errors", the payment webhook's
refusals in docs/payments-and-saga.md), so a row added without a way to produce it fails here,
and so does a code the app answers that no table documents. Every row runs with ``DEBUG`` on
(the demo) and off (production); every answer must be the one problem+json shape.
"""

from __future__ import annotations

import functools
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from openapi_schema_validator import OAS30ReadValidator
from rest_framework.test import APIClient

from config.api_errors import CODE_FOR_STATUS
from config.api_https import HTTPS_REQUIRED
from config.database_unavailable import DATABASE_UNAVAILABLE
from config.error_codes import NOT_ANSWERED_BY_THE_API
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.fingerprint import all_fingerprints
from idempotency.core.keys import ScopedKey
from idempotency.core.ratelimit import reset_rate_cache
from idempotency.core.tokens import sign_token
from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import nodes as stores
from idempotency.stores.redis_store import RedisIdempotencyStore
from idempotency.web.http import business_payload
from ordering.error_codes import OrderingErrorCode
from ordering.models import Coupon, Dish, Order, Payment
from ordering.payments.error_codes import PaymentErrorCode
from ordering.payments.registry import webhook_secrets
from ordering.payments.signatures import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from ordering.payments.simulated import signed_callback
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.api_keys import issue_api_key
from tenants.diner_sessions import end_session, open_session
from tenants.error_codes import TenantErrorCode
from tenants.models import ApiClient, Tenant
from tests.hardening.conftest import PROBLEM_JSON
from tests.support.auth import diner_token
from tests.support.database_gone import database_unreachable
from tests.support.order_id_conditions import clock_stepped_back

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.hardening.error_urls")]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_TABLES = [ROOT / "README.md", ROOT / "docs" / "payments-and-saga.md"]
# A table row: | 409 | `ORDER_STATUS_CONFLICT` | when ... |  (several codes: `A` / `B`)
ROW = re.compile(r"^\|\s*(\d{3})\s*\|([^|]*)\|")
HEADER = re.compile(r"^\|\s*status\s*\|\s*`?code`?\s*\|", re.IGNORECASE)
CODE = re.compile(r"`([A-Z][A-Z0-9_]+)`")
DINER = "d1"
ORDERS = "/api/v1/orders/"
TOKENS = "/api/v1/idempotency-tokens/"
CALLBACK = "/api/v1/payments/callback/"


def documented_rows() -> list[tuple[str, int, str]]:
    """(file name, status, code) of every row of every "status | code" table in the docs."""
    rows = []
    for path in DOCUMENTED_TABLES:
        in_table = False
        for line in path.read_text().splitlines():
            if HEADER.match(line):
                in_table = True
                continue
            if not line.startswith("|"):
                in_table = False
                continue
            match = ROW.match(line)
            if in_table and match:
                rows += [(path.name, int(match[1]), c) for c in CODE.findall(match[2])]
    return rows


@dataclass
class App:
    """One tenant with a menu, a coupon, a diner's session and a merchant's secret key."""

    tenant: Tenant
    dish: Dish
    coupon: Coupon
    backend: ApiClient
    diner: APIClient
    merchant: APIClient
    anonymous: APIClient
    settings: Any

    def order_body(self, **changes: Any) -> dict[str, Any]:
        body = {"items": [{"dish_id": self.dish.pk, "quantity": 1}], "payment_method": "card"}
        return {**body, **changes}

    def place(self, body: Any, key: str | None = "k-1", **extra: Any) -> Any:
        if key is not None:
            extra["HTTP_IDEMPOTENCY_KEY"] = key
        return self.diner.post(ORDERS, body, format="json", **extra)

    def order(self) -> Order:
        return place_order(
            tenant=self.tenant,
            items=[ItemRequest(dish_id=self.dish.pk, quantity=1)],
            payment_method="card",
            diner_id=DINER,
            actor="test",
        )

    # The engine's name of the diner (tokens and scopes are bound to it).
    principal = f"diner:{DINER}"

    def bearer(self, token: str) -> APIClient:
        return quiet(APIClient(), HTTP_AUTHORIZATION=f"Bearer {token}")


def quiet(client: APIClient, **credentials: str) -> APIClient:
    client.raise_request_exception = False  # a crash is an answer here, not a test error
    client.credentials(**credentials)
    return client


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def app(request: pytest.FixtureRequest, settings: Any, db: None) -> App:
    settings.DEBUG = request.param
    tenant = Tenant.objects.create(slug=f"walker-{uuid.uuid4().hex[:8]}", name="Walker")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=50
    )
    coupon = Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="ONCE", kind=Coupon.Kind.PERCENT, value=Decimal("10"), max_uses=1
    )
    backend, merchant_key = issue_api_key(
        tenant=tenant, name="walker backend", kind=ApiClient.Kind.MERCHANT
    )
    return App(
        tenant=tenant,
        dish=dish,
        coupon=coupon,
        backend=backend,
        diner=quiet(APIClient(), HTTP_AUTHORIZATION=f"Bearer {diner_token(tenant, DINER)}"),
        merchant=quiet(APIClient(), HTTP_AUTHORIZATION=f"Api-Key {merchant_key}"),
        anonymous=quiet(APIClient()),
        settings=settings,
    )


# --- one way to produce each documented code ----------------------------------------------


def _over_plain_http(app: App) -> Any:
    """A site that requires HTTPS (production's default), asked over plain HTTP."""
    app.settings.SECURE_SSL_REDIRECT = True
    return app.place(app.order_body())


def _key_in_progress(app: App) -> Any:
    """Another request holds the key (claimed, not finished) while this one arrives."""
    order = app.order()
    held = ScopedKey(
        tenant=str(app.tenant.pk),
        principal=app.principal,
        method="POST",
        route="api/v1/orders/<int:order_id>/pay/",
        key="held-by-another-request",
    )
    payload = business_payload({}, (), {"order_id": order.pk})
    RedisIdempotencyStore(redis.Redis.from_url(django_settings.REDIS_URL)).claim(
        key=held.redis_key,
        fingerprints=all_fingerprints(payload, None),
        current_version=1,
        owner="another-request",
        lease_ms=30_000,
    )
    return app.diner.post(f"{ORDERS}{order.pk}/pay/", HTTP_IDEMPOTENCY_KEY=held.key)


def _token_used(app: App) -> Any:
    token = app.diner.post(TOKENS, {"count": 1}, format="json").json()["tokens"][0]
    order_id = app.place(app.order_body(), key=token).json()["id"]
    return app.diner.post(f"{ORDERS}{order_id}/pay/", HTTP_IDEMPOTENCY_KEY=token)


def _token_unknown(app: App) -> Any:
    never_issued = sign_token(tenant=str(app.tenant.pk), principal=app.principal, token_id="A" * 22)
    return app.place(app.order_body(), key=never_issued)


def _tokens_unavailable(app: App) -> Any:
    app.settings.IDEMPOTENCY = {
        **app.settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
    }
    stores.reset()
    try:
        return app.diner.post(TOKENS, {"count": 1}, format="json")
    finally:
        del app.settings.IDEMPOTENCY
        stores.reset()


def _rate_limited(app: App) -> Any:
    app.tenant.write_rate_per_minute = 1
    app.tenant.save()
    reset_rate_cache()
    r = redis.Redis.from_url(django_settings.REDIS_URL)
    stale = list(r.scan_iter(match=f"rl:{{t:{app.tenant.pk}}}*"))
    if stale:
        r.delete(*stale)
    assert app.diner.post(TOKENS, {"count": 1}, format="json").status_code == 201
    return app.diner.post(TOKENS, {"count": 1}, format="json")


def _token_quota_exceeded(app: App) -> Any:
    app.tenant.token_quota = 2
    app.tenant.save()
    assert app.diner.post(TOKENS, {"count": 2}, format="json").status_code == 201
    return app.diner.post(TOKENS, {"count": 1}, format="json")


def _session_expired(app: App) -> Any:
    app.settings.DINER_SESSION_TTL_SECONDS = -60  # issued already past its expiry
    return app.bearer(open_session(client=app.backend, diner_id="late").token).get(ORDERS)


def _session_revoked(app: App) -> Any:
    issued = open_session(client=app.backend, diner_id="signed-out")
    end_session(session_id=issued.session_id)
    return app.bearer(issued.token).get(ORDERS)


def _coupon_exhausted(app: App) -> Any:
    assert app.place(app.order_body(coupon_code="ONCE"), key="first").status_code == 201
    return app.place(app.order_body(coupon_code="ONCE"), key="second")


def _key_reused(app: App) -> Any:
    assert app.place(app.order_body(), key="same").status_code == 201
    return app.place(app.order_body(note="another payload"), key="same")


def _too_large(app: App) -> Any:
    app.settings.MAX_REQUEST_BYTES = 200
    return app.place(app.order_body(note="x" * 300))


def _suspended(app: App) -> Any:
    app.tenant.status = Tenant.Status.SUSPENDED
    app.tenant.save()
    return app.diner.get("/api/v1/menu/")


def _dish_unavailable(app: App) -> Any:
    Dish.objects.for_tenant(app.tenant).filter(pk=app.dish.pk).update(active=False)
    return app.place(app.order_body())


def _status_conflict(app: App) -> Any:
    order = app.order()
    return app.merchant.post(f"{ORDERS}{order.pk}/transition/", {"to": "COMPLETED"}, format="json")


def _callback(app: App, build: Callable[[Payment], tuple[bytes, dict[str, str]]]) -> Any:
    order = app.order()
    _, payment = pay_order(tenant=app.tenant, order_id=order.pk, actor="test")
    body, headers = build(payment)
    return app.anonymous.post(CALLBACK, data=body, content_type="application/json", headers=headers)


def _signed_raw(body: bytes) -> tuple[bytes, dict[str, str]]:
    now = int(time.time())
    secret = webhook_secrets("simulated")[0]
    signature = sign(secret=secret, timestamp=now, body=body)
    return body, {TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: signature}


def _signed_with(payment: Payment, **headers: str) -> tuple[bytes, dict[str, str]]:
    """The provider's signed callback for ``payment`` with some headers changed."""
    body, signed_headers = signed_callback(payment=payment)
    return body, {**signed_headers, **headers}


def _unknown_transaction(payment: Payment) -> tuple[bytes, dict[str, str]]:
    stranger = Payment(
        provider=payment.provider,
        provider_txn_id="sim_never_started",
        order_id=payment.order_id,
        amount=payment.amount,
        currency=payment.currency,
    )
    return signed_callback(payment=stranger)


def _order_id_unavailable(app: App) -> Any:
    with clock_stepped_back(ms=5_000):
        return app.place(app.order_body())


def _database_unavailable(app: App) -> Any:
    with database_unreachable():
        return app.place(app.order_body())


def _normalisation_collision(app: App) -> Any:
    item = {"dish_id": app.dish.pk, "quantity": 1, "caf\u00e9": 1, "cafe\u0301": 2}
    return app.place(app.order_body(items=[item]))


def _total_too_large(app: App) -> Any:
    # 100 portions at the menu's highest price and a side of 1.00: a cent over the limit
    Dish.all_tenants.filter(pk=app.dish.pk).update(price=Decimal("99999999.99"), stock=100)
    side = Dish.objects.for_tenant(app.tenant).create(
        tenant=app.tenant, name="Side", price=Decimal("1.00"), stock=1
    )
    items = [{"dish_id": app.dish.pk, "quantity": 100}, {"dish_id": side.pk, "quantity": 1}]
    return app.place(app.order_body(items=items))


def _answer_no_longer_kept(app: App) -> Any:
    assert app.place(app.order_body(), key="k-old").status_code == 201
    purge_record(IdempotencyRecord.objects.get())
    stores.local_cache().clear()
    return app.place(app.order_body(), key="k-old")


SCENARIOS: dict[str, Callable[[App], Any]] = {
    "VALIDATION_ERROR": lambda app: app.place(app.order_body(payment_method="gold")),
    "INVALID_JSON": lambda app: app.diner.post(
        ORDERS, b'{"items": [', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    ),
    "QUANTITY_INVALID": lambda app: app.place(
        app.order_body(items=[{"dish_id": app.dish.pk, "quantity": 101}])
    ),
    TenantErrorCode.SESSION_INVALID: lambda app: app.bearer("not-a-token").get(ORDERS),
    TenantErrorCode.SESSION_EXPIRED: _session_expired,
    TenantErrorCode.SESSION_REVOKED: _session_revoked,
    IdempotencyErrorCode.KEY_INVALID: lambda app: app.place(app.order_body(), key="k" * 256),
    IdempotencyErrorCode.KEY_MISSING: lambda app: app.place(app.order_body(), key=None),
    IdempotencyErrorCode.PAYLOAD_INVALID: _normalisation_collision,
    IdempotencyErrorCode.TOKEN_INVALID: lambda app: app.place(app.order_body(), key="tok_forged"),
    TenantErrorCode.API_KEY_MISSING: lambda app: app.anonymous.get("/api/v1/menu/"),
    TenantErrorCode.API_KEY_INVALID: lambda app: app.anonymous.get(
        "/api/v1/menu/", HTTP_AUTHORIZATION="Api-Key nope.nope"
    ),
    TenantErrorCode.TENANT_SUSPENDED: _suspended,
    TenantErrorCode.PERMISSION_DENIED: lambda app: app.diner.post(
        f"{ORDERS}{app.order().pk}/transition/", {"to": "ACCEPTED"}, format="json"
    ),
    OrderingErrorCode.ORDER_NOT_FOUND: lambda app: app.diner.get(f"{ORDERS}424242/"),
    "NOT_FOUND": lambda app: app.diner.get(f"{ORDERS}abc/"),
    OrderingErrorCode.CURSOR_INVALID: lambda app: app.diner.get(ORDERS, {"cursor": "nope"}),
    OrderingErrorCode.ORDER_TOTAL_TOO_LARGE: _total_too_large,
    "METHOD_NOT_ALLOWED": lambda app: app.diner.delete("/api/v1/menu/"),
    "NOT_ACCEPTABLE": lambda app: app.diner.get("/api/v1/menu/", HTTP_ACCEPT="application/xml"),
    "BAD_REQUEST": lambda app: app.diner.get("/api/v1/menu/", HTTP_HOST="evil.example"),
    HTTPS_REQUIRED: _over_plain_http,
    OrderingErrorCode.ORDER_STATUS_CONFLICT: _status_conflict,
    OrderingErrorCode.INSUFFICIENT_STOCK: lambda app: app.place(
        app.order_body(items=[{"dish_id": app.dish.pk, "quantity": 60}])
    ),
    IdempotencyErrorCode.IN_PROGRESS: _key_in_progress,
    OrderingErrorCode.ORDER_ALREADY_PLACED: _answer_no_longer_kept,
    IdempotencyErrorCode.TOKEN_USED: _token_used,
    "REQUEST_TOO_LARGE": _too_large,
    # the test client's server, as the development server, hands chunks on undecoded
    "LENGTH_REQUIRED": lambda app: app.diner.generic(
        "POST", ORDERS, HTTP_TRANSFER_ENCODING="chunked", HTTP_IDEMPOTENCY_KEY="k"
    ),
    "UNSUPPORTED_MEDIA_TYPE": lambda app: app.diner.post(
        ORDERS, b"items=1", content_type="text/plain", HTTP_IDEMPOTENCY_KEY="k"
    ),
    OrderingErrorCode.DISH_NOT_FOUND: lambda app: app.place(
        app.order_body(items=[{"dish_id": 424242, "quantity": 1}])
    ),
    OrderingErrorCode.DISH_UNAVAILABLE: _dish_unavailable,
    OrderingErrorCode.COUPON_INVALID: lambda app: app.place(app.order_body(coupon_code="NOPE")),
    OrderingErrorCode.COUPON_EXHAUSTED: _coupon_exhausted,
    IdempotencyErrorCode.KEY_REUSED: _key_reused,
    IdempotencyErrorCode.TOKEN_UNKNOWN: _token_unknown,
    IdempotencyErrorCode.RATE_LIMITED: _rate_limited,
    "SERVER_ERROR": lambda app: app.diner.get("/api/v1/boom/"),
    IdempotencyErrorCode.TOKENS_UNAVAILABLE: _tokens_unavailable,
    DATABASE_UNAVAILABLE: _database_unavailable,
    OrderingErrorCode.ORDER_ID_UNAVAILABLE: _order_id_unavailable,
    IdempotencyErrorCode.TOKEN_QUOTA_EXCEEDED: _token_quota_exceeded,
    PaymentErrorCode.PAYMENT_SIGNATURE_INVALID: lambda app: _callback(
        app, lambda p: (signed_callback(payment=p)[0], {})
    ),
    PaymentErrorCode.PAYMENT_TIMESTAMP_INVALID: lambda app: _callback(
        app, lambda p: _signed_with(p, **{TIMESTAMP_HEADER: "soon"})
    ),
    PaymentErrorCode.PAYMENT_TIMESTAMP_STALE: lambda app: _callback(
        app, lambda p: signed_callback(payment=p, timestamp=int(time.time()) - 301)
    ),
    PaymentErrorCode.PAYMENT_PROVIDER_UNKNOWN: lambda app: _callback(
        app, lambda p: _signed_with(p, **{"X-Provider": "paypal"})
    ),
    PaymentErrorCode.PAYMENT_CALLBACK_INVALID: lambda app: _callback(
        app, lambda p: _signed_raw(b'{"event_id": "evt_x", "status": "maybe"}')
    ),
    PaymentErrorCode.PAYMENT_NOT_FOUND: lambda app: _callback(app, _unknown_transaction),
}


@pytest.mark.parametrize(
    ("doc", "status", "code"),
    [pytest.param(*row, id=f"{row[1]}-{row[2]}") for row in documented_rows()],
)
def test_each_documented_error_is_answered_as_documented(
    app: App, doc: str, status: int, code: str
) -> None:
    assert code in SCENARIOS, f"{doc} documents {code} but no scenario here produces it"
    response = SCENARIOS[code](app)
    assert response.status_code == status, (code, response.status_code, response.content[:300])
    assert response["Content-Type"] == PROBLEM_JSON, (code, response.content[:300])
    body = json.loads(response.content)
    assert body["code"] == code, body
    assert body["status"] == status, body
    assert isinstance(body["detail"], str) and body["detail"], body


@functools.cache
def served_schema() -> dict[str, Any]:
    """The API schema as an app developer downloads it (the same whatever the settings)."""
    return APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()


@pytest.mark.parametrize(
    ("doc", "status", "code"),
    [pytest.param(*row, id=f"{row[1]}-{row[2]}") for row in documented_rows()],
)
def test_each_documented_error_conforms_to_the_served_schema(
    app: App, doc: str, status: int, code: str
) -> None:
    # a client generated from the schema reads each member the error carries (the stock
    # refusal's dish_id, the conflict's allowed_moves) only if the schema declares it, and
    # tells the codes apart only if it names them
    schema = served_schema()
    body = json.loads(SCENARIOS[code](app).content)
    problem = schema["components"]["schemas"]["Problem"]
    assert set(body) <= set(problem["properties"]), (code, set(body) - set(problem["properties"]))
    OAS30ReadValidator({**schema, "$ref": "#/components/schemas/Problem"}).validate(body)


# Invalid inputs of every endpoint that validates a body or a path, each answered 400
# VALIDATION_ERROR with ``errors``: a field's messages, an object's fields (contact, a body that
# is no object), a list's elements by index (items, tokens).
INVALID_INPUTS: dict[str, Callable[[App], Any]] = {
    "a field's value": lambda app: app.place(app.order_body(payment_method="gold"), key="e1"),
    "fields missing": lambda app: app.place({}, key="e2"),
    "a body that is no object": lambda app: app.place([1, 2], key="e3"),
    "items not a list": lambda app: app.place(app.order_body(items="x"), key="e4"),
    "items' elements": lambda app: app.place(
        app.order_body(items=[{"dish_id": app.dish.pk, "quantity": 1}, {"dish_id": "a"}, 5]),
        key="e5",
    ),
    "a nested object's field": lambda app: app.place(
        app.order_body(contact={"phone": "x"}), key="e6"
    ),
    "a token count": lambda app: app.diner.post(TOKENS, {"count": "a"}, format="json"),
    "tokens' elements": lambda app: app.diner.post(
        f"{TOKENS}check/", {"tokens": ["a", 5, None]}, format="json"
    ),
    "a diner id a merchant key must name": lambda app: app.merchant.post(
        "/api/v1/diner-sessions/", {}, format="json"
    ),
    "a diner id in the path": lambda app: app.merchant.post(
        "/api/v1/diners/a%20b/revoke-sessions/", format="json"
    ),
    "a move's target": lambda app: app.merchant.post(
        f"{ORDERS}{app.order().pk}/transition/", {"to": "x"}, format="json"
    ),
}


@pytest.mark.parametrize("case", list(INVALID_INPUTS))
def test_the_field_errors_of_invalid_input_are_what_the_schema_declares(
    app: App, case: str
) -> None:
    # a client generated from the schema types ``errors`` to walk it (a field's messages, or
    # a nested object's or a list's errors by field or index); declared as any value, it gave
    # an app nothing to walk, and a validator nothing to check
    schema = served_schema()
    response = INVALID_INPUTS[case](app)
    body = json.loads(response.content)
    assert (response.status_code, body["code"]) == (400, "VALIDATION_ERROR"), body
    assert isinstance(body.get("errors"), dict) and body["errors"], body
    problem = OAS30ReadValidator({**schema, "$ref": "#/components/schemas/Problem"})
    problem.validate(body)
    for never_sent in ("Invalid input", 1, ["Invalid input"], {"items": 1}, {"items": [1]}):
        assert not problem.is_valid({**body, "errors": never_sent}), never_sent


def test_the_tables_are_found_and_have_no_duplicate_codes() -> None:
    rows = documented_rows()
    codes = [code for _, _, code in rows]
    assert len(codes) == len(set(codes)), codes
    assert {doc for doc, _, _ in rows} == {p.name for p in DOCUMENTED_TABLES}
    assert len(rows) >= 35


def declared_codes() -> set[str]:
    """Every code the registries declare: the enums, the codes of bare statuses and the codes
    the API's error handling names by itself."""
    return {
        *OrderingErrorCode,
        *TenantErrorCode,
        *IdempotencyErrorCode,
        *PaymentErrorCode,
        *(code for code, _ in CODE_FOR_STATUS.values()),
        DATABASE_UNAVAILABLE,
        HTTPS_REQUIRED,
        "VALIDATION_ERROR",
        "INVALID_JSON",
    }


def test_every_code_the_app_can_answer_is_documented() -> None:
    declared = declared_codes()
    documented = {code for _, _, code in documented_rows()}
    assert declared - NOT_ANSWERED_BY_THE_API - documented == set()
    assert set(SCENARIOS) == documented  # no scenario for a row that is gone


def test_the_schema_s_codes_are_those_the_registries_declare_the_api_answers(db: None) -> None:
    schema = served_schema()
    code = schema["components"]["schemas"]["Problem"]["properties"]["code"]
    codes = schema["components"]["schemas"][code["$ref"].rsplit("/", 1)[-1]]["enum"]
    assert sorted(codes) == sorted(declared_codes() - NOT_ANSWERED_BY_THE_API)
