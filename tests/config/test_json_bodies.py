"""Request bodies are JSON only, on every API write (config/json_bodies.py): the operations
whose views read no body (sign-out, refresh, a diner's revocation) refuse a form as the others
do, before anything runs, instead of answering it as if it were JSON."""

from __future__ import annotations

import gzip
from decimal import Decimal

import pytest
from django.test import Client

from ordering.models import Dish, Order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.support.auth import diner_token

pytestmark = pytest.mark.django_db
SESSIONS = "/api/v1/diner-sessions/"
JSON = "application/json"
ORDER_BODY = b'{"items": [{"dish_id": 1, "quantity": 1}], "payment_method": "card"}'
NOT_JSON = [
    pytest.param("application/x-www-form-urlencoded", b"a=b", id="form"),
    pytest.param("multipart/form-data; boundary=x", b"--x--\r\n", id="multipart"),
    pytest.param("text/plain", b"{}", id="text"),
]


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="bodies", name="Bodies")


def merchant_key(tenant: Tenant) -> str:
    return issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)[1]


@pytest.mark.parametrize("media_type, body", NOT_JSON)
@pytest.mark.parametrize("action", ["refresh/", "end/"])
def test_a_session_s_refresh_or_sign_out_with_a_body_not_json_is_415_and_does_nothing(
    tenant: Tenant, action: str, media_type: str, body: bytes
) -> None:
    """Red: 200 (a new token) and 204 (signed out), the form taken for JSON."""
    token = diner_token(tenant)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    refused = Client().post(f"{SESSIONS}{action}", body, content_type=media_type, **auth)

    assert refused.status_code == 415, refused.content
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json() == {
        "code": "UNSUPPORTED_MEDIA_TYPE",
        "detail": f'Unsupported media type "{media_type}" in request. Request bodies are JSON '
        "only (Content-Type: application/json).",
        "status": 415,
    }
    # the session is as it was: still valid, and the same request without a body is served
    assert Client().get("/api/v1/orders/", **auth).status_code == 200
    served = Client().post(f"{SESSIONS}{action}", b"", content_type="application/json", **auth)
    assert served.status_code in (200, 204)


@pytest.mark.parametrize("media_type, body", NOT_JSON)
def test_a_diner_s_revocation_with_a_body_not_json_is_415_and_revokes_nothing(
    tenant: Tenant, media_type: str, body: bytes
) -> None:
    token = diner_token(tenant, "diner-7")
    merchant = {"HTTP_AUTHORIZATION": f"Api-Key {merchant_key(tenant)}"}

    refused = Client().post(
        "/api/v1/diners/diner-7/revoke-sessions/", body, content_type=media_type, **merchant
    )

    assert (refused.status_code, refused.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    diner = Client().get("/api/v1/orders/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert diner.status_code == 200


@pytest.mark.parametrize(
    "media_type", ["application/json", "APPLICATION/JSON", "application/json; charset=utf-8"]
)
def test_a_json_body_or_none_is_let_through(tenant: Tenant, media_type: str) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}"}

    with_json = Client().post(f"{SESSIONS}refresh/", b"{}", content_type=media_type, **auth)
    empty_form = Client().post(
        f"{SESSIONS}refresh/", b"", content_type="application/x-www-form-urlencoded", **auth
    )

    assert (with_json.status_code, empty_form.status_code) == (200, 200)


def test_the_schema_declares_415_on_every_write() -> None:
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    writes = [
        (path, method)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in ("post", "put", "patch")
    ]
    undeclared = [w for w in writes if "415" not in schema["paths"][w[0]][w[1]]["responses"]]
    assert writes and undeclared == []


@pytest.mark.parametrize(
    "path, status, code",
    [
        pytest.param("/api/v1/menu/", 405, "METHOD_NOT_ALLOWED", id="a-read-only-route"),
        pytest.param("/api/schema/", 405, "METHOD_NOT_ALLOWED", id="the-schema"),
        pytest.param("/api/v1/nowhere/", 404, "NOT_FOUND", id="no-route"),
    ],
)
@pytest.mark.parametrize(
    "media_type, body",
    [
        pytest.param("application/x-www-form-urlencoded", b"a=b", id="form"),
        # red: 415 "Send the body in UTF-8", where the same body declared UTF-8 met the 404/405
        pytest.param("application/json; charset=latin-1", b"{}", id="latin-1"),
        pytest.param("application/json; charset=punycode", b"{}", id="punycode"),
    ],
)
def test_a_route_that_takes_no_post_answers_as_such_not_415(
    tenant: Tenant, path: str, status: int, code: str, media_type: str, body: bytes
) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}"}

    answer = Client().post(path, body, content_type=media_type, **auth)

    assert (answer.status_code, answer.json()["code"]) == (status, code)


def test_a_form_is_refused_before_its_credential_is_checked(tenant: Tenant) -> None:
    answer = Client().post(
        "/api/v1/orders/1/pay/",
        b"a=b",
        content_type="application/x-www-form-urlencoded",
        HTTP_AUTHORIZATION="Bearer not-a-token",
    )

    assert (answer.status_code, answer.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")


@pytest.mark.parametrize(
    "coding, compressed",
    [
        pytest.param("gzip", True, id="a-gzip-body"),
        pytest.param("gzip", False, id="plain-json-labelled-gzip"),
        pytest.param("br", False, id="plain-json-labelled-br"),
        pytest.param("identity, gzip", True, id="a-list-of-codings"),
    ],
)
def test_a_body_in_a_content_coding_is_415_and_its_key_stays_free(
    tenant: Tenant, coding: str, compressed: bool
) -> None:
    """Red: a gzip body was 400 INVALID_JSON ("can't decode byte 0x8b"), and a plain one
    labelled with a coding was read as if unlabelled and placed the order (201): the server
    decodes no content coding, so it cannot read the body the client meant."""
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Soup", price=Decimal("4.00"), stock=10
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}", "HTTP_IDEMPOTENCY_KEY": "k-1"}
    order = ORDER_BODY.replace(b'"dish_id": 1', f'"dish_id": {dish.pk}'.encode())
    body = gzip.compress(order) if compressed else order

    refused = Client().post(
        "/api/v1/orders/", body, content_type=JSON, HTTP_CONTENT_ENCODING=coding, **auth
    )

    assert refused.status_code == 415, refused.content
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json() == {
        "code": "UNSUPPORTED_MEDIA_TYPE",
        "detail": f'Unsupported content coding "{coding}" in request. Send the body '
        "uncompressed (no Content-Encoding, or identity).",
        "status": 415,
    }
    assert refused["Accept-Encoding"] == "identity"
    assert not Order.all_tenants.filter(tenant=tenant).exists()
    placed = Client().post("/api/v1/orders/", order, content_type=JSON, **auth)
    assert (placed.status_code, placed["X-Idempotent-Result"]) == (201, "MISS")


@pytest.mark.parametrize("coding", ["identity", "IDENTITY", ""])
def test_a_body_declared_identity_is_read(tenant: Tenant, coding: str) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}"}

    answer = Client().post(
        f"{SESSIONS}refresh/", b"{}", content_type=JSON, HTTP_CONTENT_ENCODING=coding, **auth
    )

    assert answer.status_code == 200, answer.content


NOT_WELL_FORMED = [
    pytest.param(b"{", id="cut-short"),
    pytest.param(b'{"a": 1, "a": 2}', id="a-member-named-twice"),
    pytest.param(b"\xef\xbb\xbf{}", id="a-byte-order-mark"),
]


@pytest.mark.parametrize("body", NOT_WELL_FORMED)
@pytest.mark.parametrize("action", ["refresh/", "end/"])
def test_a_session_s_refresh_or_sign_out_with_a_body_that_is_not_json_is_400_and_does_nothing(
    tenant: Tenant, action: str, body: bytes
) -> None:
    """Red: 200 (a new token) and 204 (signed out), where paying or cancelling, which read no
    body either, refuse the same body 400 INVALID_JSON."""
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}"}

    refused = Client().post(f"{SESSIONS}{action}", body, content_type=JSON, **auth)

    assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_JSON"), refused.content
    assert Client().get("/api/v1/orders/", **auth).status_code == 200  # still signed in


@pytest.mark.parametrize("body", NOT_WELL_FORMED)
def test_a_diner_s_revocation_with_a_body_that_is_not_json_is_400_and_revokes_nothing(
    tenant: Tenant, body: bytes
) -> None:
    token = diner_token(tenant, "diner-8")
    merchant = {"HTTP_AUTHORIZATION": f"Api-Key {merchant_key(tenant)}"}

    refused = Client().post(
        "/api/v1/diners/diner-8/revoke-sessions/", body, content_type=JSON, **merchant
    )

    assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_JSON"), refused.content
    diner = Client().get("/api/v1/orders/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert diner.status_code == 200


def test_the_schema_describes_the_400_of_a_body_on_the_operations_that_read_none() -> None:
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in (
        f"{SESSIONS}refresh/",
        f"{SESSIONS}end/",
        "/api/v1/diners/{diner_id}/revoke-sessions/",
    ):
        described = schema["paths"][path]["post"]["responses"]["400"]["description"]
        assert "body" in described, (path, described)


@pytest.mark.django_db
def test_every_415_of_the_schema_declares_the_accept_encoding_its_answer_may_carry() -> None:
    """Red: a body in a content coding is refused 415 with ``Accept-Encoding: identity``
    (above), but no 415 of the schema declared the header, so a client generated from it
    could not read which coding the server takes."""
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    refusals = [
        (path, method, operation["responses"]["415"])
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if isinstance(operation, dict) and "415" in operation.get("responses", {})
    ]
    assert refusals, "no operation declares a 415"
    undeclared = [(p, m) for p, m, r in refusals if "Accept-Encoding" not in r.get("headers", {})]
    assert undeclared == []
    declared = refusals[0][2]["headers"]["Accept-Encoding"]
    assert declared["schema"] == {"type": "string", "enum": ["identity"]}
    assert declared.get("required", False) is False  # a body that is not JSON gets none


@pytest.mark.parametrize(
    "media_type",
    ["application/json; charset=latin-1", "text/plain; charset=punycode"],
)
@pytest.mark.parametrize("path", ["/api/v1/menu/", "/api/v1/orders/"])
def test_a_read_with_a_body_in_another_charset_is_answered_as_without_it(
    tenant: Tenant, path: str, media_type: str
) -> None:
    """A read's body is read by nothing, so it is not looked at, whatever it declares (as a
    body that is not JSON or sent in a content coding is not, above). Red: 415, a status no
    read of the schema declares, so a client generated from it had no type for the answer."""
    publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)[1]
    credential = {
        "/api/v1/menu/": f"Api-Key {publishable}",
        "/api/v1/orders/": f"Bearer {diner_token(tenant)}",
    }[path]
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()

    answer = Client().generic(
        "GET", path, b"{}", content_type=media_type, HTTP_AUTHORIZATION=credential
    )

    assert answer.status_code == 200, answer.content
    assert "415" not in schema["paths"][path]["get"]["responses"]
