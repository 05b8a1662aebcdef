"""Hostile input: every malformed, mistyped, oddly encoded or injection-shaped request is refused
with a 4xx and a machine-readable ``code`` — never a 5xx — and writes nothing.

Requests go through the whole stack in-process (middleware, authentication, the idempotency
engine, DRF, services, PostgreSQL) with a client that turns unhandled exceptions into the 500
answer a real server would give, so a crash shows up as ``500 != 400``.

Legitimate-but-odd text (RTL overrides, zero-width joiners, 4-byte emoji, SQL-looking notes) is
*accepted* and stored verbatim: refusing it would be a bug too.
"""

from __future__ import annotations

import json
import time
import unicodedata
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import resolve
from rest_framework.fields import empty
from rest_framework.test import APIClient

from config.api_errors import problem_body
from idempotency.models import IdempotencyRecord
from ordering.api.serializers import ItemInSerializer
from ordering.models import Coupon, Order, OrderStatus, Payment
from ordering.services.placing import MAX_LINES
from tenants.models import DinerSession
from tests.hardening.conftest import (
    World,
    assert_problem,
    business_rows,
    make_order,
    order_table_exists,
    owner_of,
    problem_of,
)

pytestmark = pytest.mark.django_db

ORDERS = "/api/v1/orders/"
CALLBACK = "/api/v1/payments/callback/"
Body = Callable[[int], bytes]


@pytest.fixture
def http() -> APIClient:
    """Answers 500 for an unhandled exception instead of raising it into the test."""
    return APIClient(raise_request_exception=False)


def valid(dish_id: int, **fields: Any) -> dict[str, Any]:
    return {"items": [{"dish_id": dish_id, "quantity": 1}], "payment_method": "card", **fields}


def post_order(
    http: APIClient,
    world: World,
    body: bytes | dict[str, Any],
    *,
    key: str = "hostile-0001",
    content_type: str = "application/json",
    **meta: str,
) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {
        "HTTP_AUTHORIZATION": world.auth(),
        "HTTP_IDEMPOTENCY_KEY": key,
        **meta,
    }
    return http.generic("POST", ORDERS, raw, content_type=content_type, **headers)


def unique_key() -> str:
    return f"hostile-{uuid.uuid4().hex}"


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# --- malformed JSON ---------------------------------------------------------------------

# Either refusal fits these (the parser caps depth; the engine refuses a body with no canonical
# form); what matters is a 400 with a code, never a 500.
DEPTH_OR_SHAPE = ("INVALID_JSON", "VALIDATION_ERROR", "IDEMPOTENCY_PAYLOAD_INVALID")

MALFORMED_BODIES: list[Any] = [
    pytest.param(lambda d: b'{"items": [{"dish_id": %d, "quan' % d, "INVALID_JSON", id="truncated"),
    pytest.param(
        lambda d: json.dumps(valid(d)).encode() + b" trailing",
        "INVALID_JSON",
        id="trailing-garbage",
    ),
    pytest.param(lambda d: json.dumps(valid(d)).encode() * 2, "INVALID_JSON", id="two-documents"),
    pytest.param(
        lambda d: json.dumps(valid(d))[:-1].encode() + b', "note": "\xff\xfe\xfa"}',
        "INVALID_JSON",
        id="non-utf8-bytes",
    ),
    pytest.param(
        lambda d: json.dumps(valid(d, note="café"), ensure_ascii=False).encode("latin-1"),
        "INVALID_JSON",
        id="latin1-encoded",
    ),
    pytest.param(
        lambda d: b"\xef\xbb\xbf" + json.dumps(valid(d)).encode(), "INVALID_JSON", id="utf8-bom"
    ),
    pytest.param(lambda d: b"", "VALIDATION_ERROR", id="empty-body"),
    pytest.param(lambda d: b"[1, 2, 3]", "VALIDATION_ERROR", id="json-array"),
    pytest.param(
        lambda d: json.dumps([valid(d)]).encode(), "VALIDATION_ERROR", id="array-of-order"
    ),
    pytest.param(lambda d: b'"an order please"', "VALIDATION_ERROR", id="json-string"),
    pytest.param(lambda d: b"42", "VALIDATION_ERROR", id="json-number"),
    pytest.param(lambda d: b"null", "VALIDATION_ERROR", id="json-null"),
    pytest.param(lambda d: b"true", "VALIDATION_ERROR", id="json-true"),
    pytest.param(
        lambda d: _deep(10_000).encode(),
        "INVALID_JSON",
        id="nested-arrays-10k",
    ),
    pytest.param(
        lambda d: ('{"a":' * 10_000 + "1" + "}" * 10_000).encode(),
        "INVALID_JSON",
        id="nested-objects-10k",
    ),
    pytest.param(
        lambda d: f'{{"items": {_deep(10_000)}, "payment_method": "card"}}'.encode(),
        "INVALID_JSON",
        id="nested-10k-in-items",
    ),
    pytest.param(
        lambda d: f'{{"items": {_deep(900)}, "payment_method": "card"}}'.encode(),
        DEPTH_OR_SHAPE,
        id="nested-900-in-items",
    ),
    pytest.param(
        lambda d: (
            b'{"items": [{"dish_id": %d, "quantity": 1e999999}], "payment_method": "card"}' % d
        ),
        "INVALID_JSON",
        id="quantity-1e999999",
    ),
    pytest.param(
        lambda d: json.dumps(valid(d))[:-1].encode() + b', "note": -1e999999}',
        "INVALID_JSON",
        id="note-minus-1e999999",
    ),
    pytest.param(
        lambda d: (
            b'{"items": [{"dish_id": %d, "quantity": 1%s}], "payment_method": "card"}'
            % (d, b"0" * 5000)
        ),
        "INVALID_JSON",
        id="integer-5000-digits",
    ),
    pytest.param(
        lambda d: (
            b'{"items": [{"dish_id": %d, "quantity": 1%s}], "payment_method": "card"}'
            % (d, b"0" * 4000)
        ),
        "VALIDATION_ERROR",
        id="integer-4000-digits",
    ),
    pytest.param(
        lambda d: b'{"items": [{"dish_id": %d, "quantity": NaN}], "payment_method": "card"}' % d,
        "INVALID_JSON",
        id="NaN-literal",
    ),
    pytest.param(
        lambda d: (
            b'{"items": [{"dish_id": %d, "quantity": Infinity}], "payment_method": "card"}' % d
        ),
        "INVALID_JSON",
        id="Infinity-literal",
    ),
    pytest.param(
        lambda d: json.dumps(valid(d))[:-1].encode() + b', "note": -Infinity}',
        "INVALID_JSON",
        id="minus-Infinity-literal",
    ),
    pytest.param(
        lambda d: json.dumps(
            {
                "items": [{"dish_id": d, "quantity": 1, "\u00e9": 1, "e\u0301": 2}],
                "payment_method": "card",
            }
        ).encode(),
        DEPTH_OR_SHAPE,
        id="nfc-colliding-keys-in-items",
    ),
]


@pytest.mark.parametrize("body, code", MALFORMED_BODIES)
def test_malformed_json_is_400_with_a_code(
    http: APIClient,
    world_a: World,
    nothing_written: Callable[[], None],
    body: Body,
    code: str | tuple[str, ...],
) -> None:
    response = post_order(http, world_a, body(world_a.dish.pk))
    codes = (code,) if isinstance(code, str) else code
    assert response.status_code == 400, response.content[:300]
    assert problem_of(response)["code"] in codes
    nothing_written()


@pytest.mark.parametrize(
    "field, element",
    [
        pytest.param("items", b"[]", id="items-of-lists"),
        pytest.param("contact", b"{}", id="contact"),
    ],
)
def test_a_megabyte_of_empty_values_is_refused_by_the_parser(
    http: APIClient,
    world_a: World,
    nothing_written: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    field: str,
    element: bytes,
) -> None:
    """The probe's 1 MB of ``[]`` (or ``{}``) took 1-2.8 s to refuse: parsed, made NFC,
    fingerprinted and validated whole. Now the parser counts its values and stops."""
    fingerprinted: list[object] = []
    monkeypatch.setattr(
        "idempotency.web.drf.business_payload", lambda *a: fingerprinted.append(a) or {}
    )
    values = b",".join([element] * 340_000)
    body = b'{"%s": [%s], "payment_method": "card"}' % (field.encode(), values)
    response = post_order(http, world_a, body)
    assert "more than 10000 values" in assert_problem(response, 400, "INVALID_JSON")["detail"]
    assert fingerprinted == []
    assert len(response.content) < 300
    nothing_written()


def test_too_many_lines_are_refused_before_any_line_is_validated(
    http: APIClient,
    world_a: World,
    nothing_written: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[object] = []
    validate = ItemInSerializer.run_validation

    def counting(serializer: ItemInSerializer, data: object = empty) -> object:
        validated.append(data)
        return validate(serializer, data)

    monkeypatch.setattr(ItemInSerializer, "run_validation", counting)
    body = {"items": [[]] * (MAX_LINES + 1), "payment_method": "card"}
    response = post_order(http, world_a, body)
    errors = assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
    assert errors == {
        "items": {"non_field_errors": [f"Ensure this field has no more than {MAX_LINES} elements."]}
    }
    assert validated == []
    nothing_written()


def test_undeclared_keys_colliding_after_nfc_are_ignored(http: APIClient, world_a: World) -> None:
    """Only declared fields are fingerprinted; unknown ones are ignored like DRF ignores them."""
    body = {**valid(world_a.dish.pk), "\u00e9": 1, "e\u0301": 2}
    assert post_order(http, world_a, body).status_code == 201


MULTIPART = (
    b'--XyZ\r\nContent-Disposition: form-data; name="payment_method"\r\n\r\ncard\r\n--XyZ--\r\n'
)


@pytest.mark.parametrize(
    "content_type, raw, status, code",
    [
        pytest.param("text/plain", b"items=1", 415, "UNSUPPORTED_MEDIA_TYPE", id="text-plain"),
        pytest.param("application/xml", b"<order/>", 415, "UNSUPPORTED_MEDIA_TYPE", id="xml"),
        pytest.param(
            "application/x-www-form-urlencoded",
            b"items=1&payment_method=card",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            id="form-encoded",
        ),
        pytest.param(
            "multipart/form-data; boundary=XyZ",
            MULTIPART,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            id="multipart",
        ),
        pytest.param(
            "application/json; charset=utf-16",
            None,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            id="charset-utf16",
        ),
        *[
            pytest.param(
                f"{media_type}; charset={charset}",
                raw,
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                id=f"{media_type.split('/')[1][:9]}-{charset}",
            )
            # punycode and undefined fail decoding with a bare UnicodeError (a 500 once)
            for charset in ("punycode", "undefined", "rot13", "zlib", "latin-1", "no-such")
            for media_type, raw in [
                ("application/json", None),
                ("application/x-www-form-urlencoded", b"items=1&payment_method=card"),
                ("multipart/form-data; boundary=XyZ", MULTIPART),
            ]
        ],
    ],
)
def test_unexpected_media_types_and_charsets_are_refused(
    http: APIClient,
    world_a: World,
    nothing_written: Callable[[], None],
    content_type: str,
    raw: bytes | None,
    status: int,
    code: str,
) -> None:
    body = raw if raw is not None else json.dumps(valid(world_a.dish.pk)).encode()
    response = post_order(http, world_a, body, content_type=content_type)
    assert_problem(response, status, code)
    nothing_written()


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", "utf8", "us-ascii"])
def test_utf8_under_any_of_its_names_is_read(http: APIClient, world_a: World, charset: str) -> None:
    body = json.dumps(valid(world_a.dish.pk)).encode()
    response = post_order(http, world_a, body, content_type=f"application/json; charset={charset}")
    assert response.status_code == 201, response.content[:300]


@pytest.mark.parametrize("charset", ["punycode", "undefined"])
def test_a_session_opened_in_an_exotic_charset_is_refused(
    http: APIClient, world_a: World, charset: str
) -> None:
    # given only the app's publishable key, as the probe had
    sessions_before = DinerSession.objects.count()
    response = http.generic(
        "POST",
        "/api/v1/diner-sessions/",
        b"{}",
        content_type=f"application/json; charset={charset}",
        HTTP_AUTHORIZATION=world_a.auth("publishable"),
    )
    assert_problem(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert DinerSession.objects.count() == sessions_before


def test_a_dashboard_form_in_an_exotic_charset_is_refused(http: APIClient, db: None) -> None:
    response = http.generic(
        "POST",
        "/dashboard/login/",
        b"username=a&password=b",
        content_type="application/x-www-form-urlencoded; charset=punycode",
    )
    assert response.status_code == 415, response.content[:300]
    assert response["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    ("path", "charset"),
    [
        ("/admin/login/", "latin-1"),
        ("/admin/login/", "UTF8"),
        ("/admin/ordering/order/", "punycode"),
        ("/dashboard/login/", "UTF8"),
        ("/dashboard/login/", "ascii"),
    ],
)
def test_a_page_form_in_a_charset_django_does_not_read_is_refused(
    db: None, path: str, charset: str
) -> None:
    """Django reads a form-urlencoded body only as UTF-8 under that very name: any other
    charset, an alias of UTF-8 too, is 415, before anything reads the form (red: the admin's
    page-input guard read it first, Django refused it, and the CSRF check, reading it again,
    made a 500 — with a cookie of the caller's own, no login needed)."""
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "abcdefghijklmnopqrstuvwxyzABCDEF"
    response = client.generic(
        "POST",
        path,
        b"username=a&password=b",
        content_type=f"application/x-www-form-urlencoded; charset={charset}",
        HTTP_ORIGIN="http://testserver",
    )
    assert response.status_code == 415, response.content[:300]


def test_a_page_form_in_utf_8_is_read(db: None) -> None:
    response = Client().generic(
        "POST",
        "/dashboard/login/",
        b"username=a&password=b",
        content_type="application/x-www-form-urlencoded; charset=UTF-8",
    )
    assert response.status_code == 200  # the sign-in page again, with its error


# --- wrong types in every field ---------------------------------------------------------
# Many cases per field: each runs as a subtest (one failure names its value), which keeps the
# sweep fast — the per-test database and engine reset costs more than a request.

NOT_A_LIST = ["a string", 1, {}, None, True, [], ["x"], [1], [None]]
# a number sent as a string, or with a fraction of zero, is not coerced either: the fingerprint
# tells "1" from 1, so the input must too
NOT_AN_INT = ["abc", "1e3", "", "1", " 2", 1.0, 1.5, True, None, [], {}, 0, -1, 2**63, 10**40]
NOT_A_TEXT = [[], {}, True, ["a"], {"a": 1}, 1, 0, 1.5]
WRONG_VALUES: dict[str, list[Any]] = {
    "items": NOT_A_LIST,
    "dish_id": NOT_AN_INT,
    "quantity": NOT_AN_INT,  # 101 is a number of portions, refused as QUANTITY_INVALID
    "payment_method": [*NOT_A_TEXT, 1, None, "", "bitcoin", "CARD"],
    "coupon_code": [*NOT_A_TEXT, "X" * 41],
    "note": [*NOT_A_TEXT, "x" * 501, "🍕" * 501],
}


def with_field(dish_id: int, field: str, value: Any) -> dict[str, Any]:
    body = valid(dish_id)
    if field in {"dish_id", "quantity"}:
        body["items"] = [{**body["items"][0], field: value}]
    else:
        body[field] = value
    return body


def shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) < 40 else f"{text[:20]}...({len(text)} chars)"


@pytest.mark.parametrize("field", list(WRONG_VALUES))
def test_a_wrong_value_in_any_field_is_a_validation_error(
    http: APIClient, world_a: World, subtests: Any, field: str
) -> None:
    before = business_rows()
    top_level = "items" if field in {"dish_id", "quantity"} else field
    for value in WRONG_VALUES[field]:
        with subtests.test(msg=f"{field}={shown(value)}"):
            response = post_order(
                http, world_a, with_field(world_a.dish.pk, field, value), key=unique_key()
            )
            assert top_level in assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
            assert business_rows() == before


@pytest.mark.parametrize(
    "contact",
    [{"phone": 5551234}, {"phone": 5.5}, {"address": 12}, {"address": True}],
    ids=["phone-number", "phone-float", "address-number", "address-true"],
)
def test_contact_text_sent_as_a_number_is_a_validation_error(
    http: APIClient, world_a: World, nothing_written: Callable[[], None], contact: dict
) -> None:
    response = post_order(http, world_a, valid(world_a.dish.pk, contact=contact))
    assert "contact" in assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
    nothing_written()


@pytest.mark.parametrize("missing", ["items", "payment_method"])
def test_a_missing_required_field_is_a_validation_error(
    http: APIClient, world_a: World, nothing_written: Callable[[], None], missing: str
) -> None:
    body = valid(world_a.dish.pk)
    del body[missing]
    assert assert_problem(post_order(http, world_a, body), 400, "VALIDATION_ERROR")["errors"][
        missing
    ]
    nothing_written()


# --- Unicode ----------------------------------------------------------------------------

# json.dumps escapes lone surrogates as \ud800: the bodies themselves are valid UTF-8 JSON.
TEXT_POSTGRES_CANNOT_STORE = {
    "lone-high-surrogate": "\ud800",
    "lone-low-surrogate": "a\udc00b",
    "reversed-surrogate-pair": "\udc00\ud800",
    "nul-only": "\u0000",
    "nul-in-the-middle": "TEN\u0000; DROP TABLE ordering_order",
}
ODD_BUT_VALID_TEXT = {
    "rtl-override": "\u202eizzip\u202c",
    "zero-width-joiners": "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "4-byte-emoji": "🍕🍝🥗",
    "combining-accent": "Cafe\u0301 (NFD)",
    "bom-and-noncharacters": "\ufeff\ufffe\uffff",
    "zero-width-space": "a\u200bb\u2060c",
}


@pytest.mark.parametrize("field", ["note", "coupon_code"])
def test_text_postgres_cannot_store_is_a_validation_error(
    http: APIClient, world_a: World, subtests: Any, field: str
) -> None:
    before = business_rows()
    for name, text in TEXT_POSTGRES_CANNOT_STORE.items():
        with subtests.test(msg=name):
            response = post_order(
                http, world_a, valid(world_a.dish.pk, **{field: text}), key=unique_key()
            )
            assert field in assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
            assert business_rows() == before


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("\ud800", id="lone-surrogate"),
        pytest.param("card\u0000", id="nul"),
        pytest.param("card\u200b", id="zero-width-space"),
        pytest.param("\u202ecard", id="rtl-override"),
    ],
)
def test_odd_text_in_the_payment_method_is_a_validation_error(
    http: APIClient, world_a: World, nothing_written: Callable[[], None], text: str
) -> None:
    response = post_order(http, world_a, valid(world_a.dish.pk, payment_method=text))
    assert "payment_method" in assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
    nothing_written()


BIG = 500_000  # what a 1 MiB body limit lets through in one field


@pytest.mark.parametrize(
    "body, code",
    [
        pytest.param(
            lambda d: json.dumps(valid(d, payment_method="p" * BIG)).encode(),
            "VALIDATION_ERROR",
            id="payment-method",
        ),
        pytest.param(
            lambda d: json.dumps(
                {**valid(d), "payment_method": "card", "items": [{"dish_id": "d" * BIG}]}
            ).encode(),
            "VALIDATION_ERROR",
            id="dish-id",
        ),
        pytest.param(
            lambda d: json.dumps(valid(d)).encode()[:-1] + b', "x": 1e' + b"9" * BIG + b"}",
            "INVALID_JSON",
            id="number-out-of-range",
        ),
        pytest.param(
            lambda d: (
                json.dumps({"items": [{"dish_id": d, "quantity": 1}], "payment_method": "card"})
                .encode()
                .replace(
                    b'"quantity": 1',
                    b'"quantity": 1, "\\u00e9'
                    + b"k" * BIG
                    + b'": 1, "e\\u0301'
                    + b"k" * BIG
                    + b'": 2',
                )
            ),
            "IDEMPOTENCY_PAYLOAD_INVALID",
            id="colliding-field-names",
        ),
    ],
)
def test_an_error_echoes_at_most_a_short_prefix_of_the_input(
    http: APIClient,
    world_a: World,
    nothing_written: Callable[[], None],
    body: Body,
    code: str,
) -> None:
    response = post_order(http, world_a, body(world_a.dish.pk))

    assert_problem(response, 400, code)
    assert len(response.content) < 1_000
    nothing_written()


def test_a_refused_choice_names_the_choices_never_the_value(
    http: APIClient, world_a: World
) -> None:
    """The refusal is the key's stored reply: what was typed into the wrong field (a phone
    number) is not kept with it (red with DRF's message, which quotes the value)."""
    phone = "+33 6 12 34 56 78"
    response = post_order(http, world_a, valid(world_a.dish.pk, payment_method=phone))

    (message,) = assert_problem(response, 400, "VALIDATION_ERROR")["errors"]["payment_method"]
    assert message == "Must be one of: card, wallet, cash."
    assert phone.encode() not in response.content
    stored = IdempotencyRecord.objects.get()
    assert phone.encode() not in bytes(stored.response_body)


def test_an_echo_in_an_error_body_keeps_the_start_of_the_value() -> None:
    body = problem_body(400, "VALIDATION_ERROR", "Invalid input", errors={"f": ["q" * BIG]})
    assert body["errors"]["f"] == ["q" * 200 + "…"]


def test_odd_but_valid_unicode_in_the_note_is_stored_in_nfc(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    """Kept as sent, but for the normal form (config/parsers.py): a decomposed accent is
    composed, as the idempotency fingerprint reads it."""
    for name, text in ODD_BUT_VALID_TEXT.items():
        with subtests.test(msg=name):
            response = post_order(http, world_a, valid(world_a.dish.pk, note=text), key=name)
            assert response.status_code == 201, response.content
            stored = unicodedata.normalize("NFC", text)
            assert (stored == text) is (name != "combining-accent")
            assert response.json()["note"] == stored
            assert Order.all_tenants.get(pk=response.json()["id"]).note == stored


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        pytest.param({"note": None}, {}, id="note-null-then-absent"),
        pytest.param({"contact": None}, {}, id="contact-null-then-absent"),
        pytest.param({"note": "Cafe\u0301"}, {"note": "Caf\u00e9"}, id="note-nfd-then-nfc"),
    ],
)
def test_what_the_fingerprint_calls_the_same_the_order_reads_the_same(
    http: APIClient, world_a: World, first: dict[str, Any], retry: dict[str, Any]
) -> None:
    """A body that differs from another only where the fingerprint does not look (a top-level
    null for an absent field, the Unicode normal form) is the same input to the view: placed
    both ways, with the same answer on a retry under the key (red without the parser's
    reading: "note may not be null" on the first, replayed to the corrected retry)."""
    placed = post_order(http, world_a, valid(world_a.dish.pk, **first), key="same-op")
    assert placed.status_code == 201, placed.content
    again = post_order(http, world_a, valid(world_a.dish.pk, **retry), key="same-op")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == placed.content
    other_key = post_order(http, world_a, valid(world_a.dish.pk, **retry), key="other-op")
    assert other_key.status_code == 201, other_key.content
    shown = {name: value for name, value in other_key.json().items() if name not in VOLATILE}
    assert shown == {name: value for name, value in placed.json().items() if name not in VOLATILE}


VOLATILE = {"id", "number", "number_label", "created_at", "updated_at", "transitions"}


def test_a_decomposed_coupon_code_finds_the_composed_coupon(
    http: APIClient, world_a: World
) -> None:
    Coupon.objects.for_tenant(world_a.tenant).create(
        tenant=world_a.tenant, code="CAF\u00c910", kind=Coupon.Kind.PERCENT, value=10
    )
    response = post_order(
        http, world_a, valid(world_a.dish.pk, coupon_code="CAFE\u030110"), key="nfd-coupon"
    )
    assert response.status_code == 201, response.content
    assert Order.all_tenants.get(pk=response.json()["id"]).coupon.code == "CAF\u00c910"


def test_odd_unicode_never_matches_a_coupon(http: APIClient, world_a: World, subtests: Any) -> None:
    before = business_rows()
    for name, text in ODD_BUT_VALID_TEXT.items():
        with subtests.test(msg=name):
            code = world_a.coupon.code + text  # the real code with invisible or odd characters
            response = post_order(http, world_a, valid(world_a.dish.pk, coupon_code=code), key=name)
            assert_problem(response, 422, "COUPON_INVALID")
            assert business_rows() == before


def test_note_of_500_emoji_is_accepted(http: APIClient, world_a: World) -> None:
    response = post_order(http, world_a, valid(world_a.dish.pk, note="🍕" * 500))
    assert response.status_code == 201, response.content
    assert Order.all_tenants.get(pk=response.json()["id"]).note == "🍕" * 500


# --- SQL-injection-shaped strings -------------------------------------------------------
# Each test sends every string (as a subtest) and then checks the order table still exists.

SQLI = {
    "or-1-eq-1": "' OR 1=1 --",
    "drop-table": '"; DROP TABLE ordering_order; --',
    "stacked-sleep": "1; SELECT pg_sleep(5) --",
    "union-select": "' UNION SELECT secret_hash --",
    "like-wildcards": "%' AND note LIKE '%",
}


def test_sql_in_the_note_is_stored_as_text(http: APIClient, world_a: World, subtests: Any) -> None:
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            response = post_order(http, world_a, valid(world_a.dish.pk, note=sql), key=name)
            assert response.status_code == 201, response.content
            assert Order.all_tenants.get(pk=response.json()["id"]).note == sql
    assert order_table_exists()
    assert Order.all_tenants.count() == len(SQLI)


@pytest.mark.parametrize(
    "field, status, code",
    [
        pytest.param("coupon_code", 422, "COUPON_INVALID", id="coupon_code"),
        pytest.param("payment_method", 400, "VALIDATION_ERROR", id="payment_method"),
        pytest.param("dish_id", 400, "VALIDATION_ERROR", id="dish_id"),
        pytest.param("quantity", 400, "VALIDATION_ERROR", id="quantity"),
    ],
)
def test_sql_in_a_body_field_is_refused(
    http: APIClient, world_a: World, subtests: Any, field: str, status: int, code: str
) -> None:
    before = business_rows()
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            response = post_order(http, world_a, with_field(world_a.dish.pk, field, sql), key=name)
            assert_problem(response, status, code)
            assert business_rows() == before
    assert order_table_exists()


def test_sql_in_a_diner_id_is_refused(http: APIClient, world_a: World, subtests: Any) -> None:
    """Diner ids come from signed sessions only; a merchant backend naming one is validated."""
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            response = http.post(
                "/api/v1/diner-sessions/",
                {"diner_id": sql},
                format="json",
                HTTP_AUTHORIZATION=world_a.auth("merchant"),
            )
            assert_problem(response, 400, "VALIDATION_ERROR")
            revoke = http.post(
                f"/api/v1/diners/{quote(sql, safe='')}/revoke-sessions/",
                HTTP_AUTHORIZATION=world_a.auth("merchant"),
            )
            assert revoke.status_code == 400 or revoke.json() == {"revoked": 0}
    assert DinerSession.objects.count() == 0
    assert order_table_exists()


def test_sql_in_the_api_key_is_refused(http: APIClient, world_a: World, subtests: Any) -> None:
    for name, sql in SQLI.items():
        for header in (f"Api-Key {sql}", f"Api-Key {sql}.{sql}", sql):
            with subtests.test(msg=f"{name}: {header[:30]}"):
                response = http.get("/api/v1/menu/", HTTP_AUTHORIZATION=header)
                assert_problem(response, 401, "API_KEY_INVALID")
    assert order_table_exists()


def test_sql_in_the_idempotency_key_is_just_a_key(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    """Printable ASCII is a valid key by contract (docs/idempotency.md): it executes once and
    replays byte for byte. The key is hashed before it reaches SQL or Redis."""
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            first = post_order(http, world_a, valid(world_a.dish.pk), key=sql)
            again = post_order(http, world_a, valid(world_a.dish.pk), key=sql)
            assert first.status_code == 201, first.content
            assert (again.status_code, again["X-Idempotent-Result"]) == (201, "HIT")
            assert again.content == first.content
    assert order_table_exists()
    assert Order.all_tenants.filter(tenant=world_a.tenant).count() == len(SQLI)


MALFORMED_KEYS = {
    "empty": ("", "1-255"),
    "256-chars": ("k" * 256, "1-255"),
    "sql-with-non-ascii": ("' OR 1=1 -- \u2603", "printable ASCII"),
    "nul": ("a\x00b", "printable ASCII"),
    "newline": ("a\nb", "printable ASCII"),
    "tab": ("a\tb", "printable ASCII"),
    "del": ("\x7f", "printable ASCII"),
}


def test_a_malformed_idempotency_key_is_refused(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    before = business_rows()
    for name, (key, detail) in MALFORMED_KEYS.items():
        with subtests.test(msg=name):
            response = post_order(http, world_a, valid(world_a.dish.pk), key=key)
            assert detail in assert_problem(response, 400, "IDEMPOTENCY_KEY_INVALID")["detail"]
            assert business_rows() == before


def test_sql_shaped_token_key_is_an_invalid_token(
    http: APIClient, world_a: World, nothing_written: Callable[[], None]
) -> None:
    response = post_order(http, world_a, valid(world_a.dish.pk), key="tok_' OR 1=1 --")
    assert_problem(response, 400, "IDEMPOTENCY_TOKEN_INVALID")
    nothing_written()


@pytest.fixture
def paid_order(world_a: World) -> Order:
    return make_order(world_a.tenant, world_a.dish, OrderStatus.PAID)


def transition(http: APIClient, world: World, order: Order, raw: bytes) -> Any:
    return http.generic(
        "POST",
        f"/api/v1/orders/{order.pk}/transition/",
        raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Api-Key {world.merchant_key}",
        HTTP_IDEMPOTENCY_KEY=unique_key(),
    )


def test_sql_in_the_transition_target_is_a_validation_error(
    http: APIClient, world_a: World, paid_order: Order, subtests: Any
) -> None:
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            response = transition(http, world_a, paid_order, json.dumps({"to": sql}).encode())
            assert "to" in assert_problem(response, 400, "VALIDATION_ERROR")["errors"]
            assert Order.all_tenants.get(pk=paid_order.pk).status == OrderStatus.PAID
    assert order_table_exists()


@pytest.mark.parametrize(
    "raw, code",
    [
        pytest.param(
            b'{"to": 1e999999}',
            "INVALID_JSON",
            id="overflowing-number",
        ),
        pytest.param(b'{"to": "\\ud800"}', "VALIDATION_ERROR", id="lone-surrogate"),
        pytest.param(b'{"to": ["ACCEPTED"]}', "VALIDATION_ERROR", id="list"),
        pytest.param(b'{"to": {"value": "ACCEPTED"}}', "VALIDATION_ERROR", id="object"),
        pytest.param(b'{"to": "accepted"}', "VALIDATION_ERROR", id="lower-case"),
        pytest.param(b'{"to": "PAID"}', "VALIDATION_ERROR", id="not-a-merchant-move"),
        pytest.param(b'{"to": "ACCEPTED\\u0000"}', "VALIDATION_ERROR", id="nul"),
        pytest.param(b'{"to": null}', "VALIDATION_ERROR", id="null"),
        pytest.param(b"{}", "VALIDATION_ERROR", id="missing"),
    ],
)
def test_hostile_transition_bodies_are_refused(
    http: APIClient, world_a: World, paid_order: Order, raw: bytes, code: str
) -> None:
    response = transition(http, world_a, paid_order, raw)
    body = assert_problem(response, 400, code)
    assert code != "VALIDATION_ERROR" or "to" in body["errors"]
    assert Order.all_tenants.get(pk=paid_order.pk).status == OrderStatus.PAID


PATH_TEMPLATES = {
    "detail": ("GET", "/api/v1/orders/{}/"),
    "pay": ("POST", "/api/v1/orders/{}/pay/"),
    "cancel": ("POST", "/api/v1/orders/{}/cancel/"),
    "transition": ("POST", "/api/v1/orders/{}/transition/"),
    "after-digits": ("GET", "/api/v1/orders/1{}/"),
}


def test_sql_in_a_path_segment_is_not_found(http: APIClient, world_a: World, subtests: Any) -> None:
    before = business_rows()
    for where, (method, template) in PATH_TEMPLATES.items():
        for name, sql in SQLI.items():
            with subtests.test(msg=f"{where}: {name}"):
                response = http.generic(
                    method,
                    template.format(quote(sql, safe="")),
                    HTTP_AUTHORIZATION=f"Api-Key {world_a.merchant_key}",
                )
                assert_problem(response, 404, "NOT_FOUND")
    assert business_rows() == before
    assert order_table_exists()


def test_sql_in_the_status_filter_is_a_validation_error(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    for name, sql in SQLI.items():
        with subtests.test(msg=name):
            response = http.get(ORDERS, {"status": sql}, HTTP_AUTHORIZATION=world_a.auth())
            assert_problem(response, 400, "VALIDATION_ERROR")
    assert order_table_exists()


def test_sql_in_a_token_check_is_an_invalid_token(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    response = http.post(
        "/api/v1/idempotency-tokens/check/",
        {"tokens": list(SQLI.values())},
        format="json",
        HTTP_AUTHORIZATION=world_a.auth(),
    )
    assert response.status_code == 200
    assert response.json()["results"] == [
        {"token": sql, "status": "invalid"} for sql in SQLI.values()
    ]
    assert order_table_exists()


def test_hostile_cursors_are_refused(http: APIClient, world_a: World, subtests: Any) -> None:
    for cursor in ("abc", "0", "-1", "99999999999999999999", "' OR 1=1 --", "1e3", "\x00"):
        with subtests.test(msg=cursor):
            response = http.get(ORDERS, {"cursor": cursor}, HTTP_AUTHORIZATION=world_a.auth())
            assert_problem(response, 400, "CURSOR_INVALID")


def test_out_of_range_order_ids_are_not_found(
    http: APIClient, world_a: World, subtests: Any
) -> None:
    for order_id in ("9223372036854775807", "9223372036854775808", "9" * 29, "0", "00001"):
        for method, action in (("GET", ""), ("POST", "pay/"), ("POST", "cancel/")):
            with subtests.test(msg=f"{method} {order_id}/{action}"):
                response = http.generic(
                    method,
                    f"/api/v1/orders/{order_id}/{action}",
                    HTTP_AUTHORIZATION=world_a.auth(),
                )
                assert_problem(response, 404, "ORDER_NOT_FOUND")


# --- dashboard forms --------------------------------------------------------------------


@pytest.mark.parametrize(
    "page, data",
    [
        pytest.param(
            "/dashboard/coupons/",
            {"code": "BIG", "kind": "amount", "value": "1", "max_uses": "99999999999"},
            id="coupon-max-uses-above-int32",
        ),
        pytest.param(
            "/dashboard/coupons/",
            {"code": "BIG", "kind": "amount", "value": "1e999999"},
            id="coupon-value-overflowing",
        ),
        pytest.param(
            "/dashboard/coupons/", {"code": "BIG", "kind": "amount", "value": "NaN"}, id="nan"
        ),
        pytest.param(
            "/dashboard/coupons/",
            {"code": "' OR 1=1 --", "kind": "amount", "value": "1"},
            id="coupon-code-sql",
        ),
        pytest.param(
            "/dashboard/menu/", {"name": "a\x00b", "price": "1", "stock": "1"}, id="dish-name-nul"
        ),
        pytest.param(
            "/dashboard/menu/", {"name": "x", "price": "1", "stock": "9" * 30}, id="stock-huge"
        ),
        pytest.param(
            "/dashboard/api-keys/", {"name": "a\x00", "kind": "merchant"}, id="key-name-nul"
        ),
    ],
)
def test_hostile_dashboard_forms_are_400(
    world_a: World, nothing_written: Callable[[], None], page: str, data: dict[str, str]
) -> None:
    response = owner_of(world_a, "owner").post(page, data)
    assert response.status_code == 400, response.content[:300]
    nothing_written()


# --- payment callback: forgery and replay -----------------------------------------------


@pytest.fixture
def callback() -> str:
    resolve(CALLBACK)  # Resolver404 (an error, not a skip) if the route went away
    return CALLBACK


@pytest.fixture
def paying(world_a: World) -> Order:
    return make_order(world_a.tenant, world_a.dish, OrderStatus.PAYING)


def payment_of(order: Order) -> Payment:
    return Payment.all_tenants.get(order=order)


def signed(payment: Payment, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
    from ordering.payments.simulated import signed_callback

    return signed_callback(payment=payment, **kwargs)


def deliver(http: APIClient, url: str, body: bytes, headers: dict[str, str]) -> Any:
    meta = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
    return http.generic("POST", url, body, content_type="application/json", **meta)


def callback_state(order: Order) -> tuple[Any, ...]:
    payment = payment_of(order)
    return (
        Order.all_tenants.get(pk=order.pk).status,
        payment.status,
        payment.updated_at,
        order.transitions.count(),
        IdempotencyRecord.objects.count(),
    )


def test_an_authentic_callback_marks_the_order_paid(
    http: APIClient, callback: str, paying: Order
) -> None:
    body, headers = signed(payment_of(paying))
    response = deliver(http, callback, body, headers)
    assert 200 <= response.status_code < 300, response.content
    assert Order.all_tenants.get(pk=paying.pk).status == OrderStatus.PAID


@pytest.mark.parametrize("same_event", [True, False], ids=["same-event-id", "new-event-id"])
def test_a_replayed_callback_with_a_fresh_timestamp_is_a_no_op(
    http: APIClient, callback: str, paying: Order, same_event: bool
) -> None:
    payment = payment_of(paying)
    body, headers = signed(payment, event_id="evt_first")
    assert 200 <= deliver(http, callback, body, headers).status_code < 300
    after_first = callback_state(paying)

    replay_body, replay_headers = signed(
        payment,
        event_id="evt_first" if same_event else "evt_second",
        timestamp=int(time.time()) + 1,
    )
    replayed = deliver(http, callback, replay_body, replay_headers)

    assert 200 <= replayed.status_code < 300, replayed.content
    assert callback_state(paying)[:4] == after_first[:4]
    assert paying.transitions.filter(to_status=OrderStatus.PAID).count() == 1


def _forged(payment: Payment) -> tuple[bytes, dict[str, str]]:
    from ordering.payments.signatures import SIGNATURE_HEADER, sign

    body, headers = signed(payment)
    ts = int(headers["X-Provider-Timestamp"])
    return body, {
        **headers,
        SIGNATURE_HEADER: sign(secret="not-the-secret", timestamp=ts, body=body),
    }


def _tampered(payment: Payment) -> tuple[bytes, dict[str, str]]:
    body, headers = signed(payment)
    return body.replace(b'"succeeded"', b'"failed"'), headers


def _unsigned(payment: Payment) -> tuple[bytes, dict[str, str]]:
    body, headers = signed(payment)
    return body, {k: v for k, v in headers.items() if k != "X-Provider-Signature"}


def _stale(payment: Payment) -> tuple[bytes, dict[str, str]]:
    return signed(payment, timestamp=int(time.time()) - 3600)


def _future(payment: Payment) -> tuple[bytes, dict[str, str]]:
    return signed(payment, timestamp=int(time.time()) + 3600)


def _bad_timestamp(payment: Payment) -> tuple[bytes, dict[str, str]]:
    body, headers = signed(payment)
    return body, {**headers, "X-Provider-Timestamp": "' OR 1=1 --"}


def _unknown_provider(payment: Payment) -> tuple[bytes, dict[str, str]]:
    body, headers = signed(payment)
    return body, {**headers, "X-Provider": "evil-provider"}


def _signed_garbage(raw: bytes) -> Callable[[Payment], tuple[bytes, dict[str, str]]]:
    def build(payment: Payment) -> tuple[bytes, dict[str, str]]:
        from ordering.payments.registry import webhook_secrets
        from ordering.payments.signatures import sign

        _, headers = signed(payment)
        ts = int(headers["X-Provider-Timestamp"])
        secret = webhook_secrets(payment.provider)[0]
        return raw, {**headers, "X-Provider-Signature": sign(secret=secret, timestamp=ts, body=raw)}

    return build


def _signed_for(change: Callable[[dict[str, Any]], None]) -> Callable[..., Any]:
    def build(payment: Payment) -> tuple[bytes, dict[str, str]]:
        body, _ = signed(payment)
        data = json.loads(body)
        change(data)
        return _signed_garbage(json.dumps(data).encode())(payment)

    return build


CALLBACK_ATTACKS = [
    pytest.param(_forged, 401, "PAYMENT_SIGNATURE_INVALID", id="wrong-secret"),
    pytest.param(_tampered, 401, "PAYMENT_SIGNATURE_INVALID", id="body-changed-after-signing"),
    pytest.param(_unsigned, 401, "PAYMENT_SIGNATURE_INVALID", id="no-signature"),
    pytest.param(_stale, 400, "PAYMENT_TIMESTAMP_STALE", id="stale-timestamp"),
    pytest.param(_future, 400, "PAYMENT_TIMESTAMP_STALE", id="future-timestamp"),
    pytest.param(_bad_timestamp, 400, "PAYMENT_TIMESTAMP_INVALID", id="sql-timestamp"),
    pytest.param(_unknown_provider, 400, "PAYMENT_PROVIDER_UNKNOWN", id="unknown-provider"),
    pytest.param(_signed_garbage(b"not json"), 400, "PAYMENT_CALLBACK_INVALID", id="not-json"),
    pytest.param(
        _signed_garbage(_deep(10_000).encode()),
        400,
        "PAYMENT_CALLBACK_INVALID",
        id="nested-10k",
    ),
    pytest.param(_signed_garbage(b"\xff\xfe{}"), 400, "PAYMENT_CALLBACK_INVALID", id="non-utf8"),
    pytest.param(
        _signed_for(lambda d: d.update(provider_txn_id="sim_\u0000x")),
        400,
        "PAYMENT_CALLBACK_INVALID",
        id="nul-in-txn-id",
    ),
    pytest.param(
        _signed_for(lambda d: d.update(amount="1e999999")),
        400,
        "PAYMENT_CALLBACK_INVALID",
        id="overflowing-amount",
    ),
    pytest.param(
        _signed_for(lambda d: d.update(provider_txn_id="' OR 1=1 --")),
        400,
        "PAYMENT_CALLBACK_INVALID",
        id="sql-txn-id",
    ),
    pytest.param(
        _signed_for(lambda d: d.update(provider_txn_id="sim_unknown")),
        404,
        "PAYMENT_NOT_FOUND",
        id="unknown-txn",
    ),
]


@pytest.mark.parametrize("attack, status, code", CALLBACK_ATTACKS)
def test_forged_or_malformed_callbacks_are_refused_and_change_nothing(
    http: APIClient,
    callback: str,
    paying: Order,
    attack: Callable[[Payment], tuple[bytes, dict[str, str]]],
    status: int,
    code: str,
) -> None:
    before = callback_state(paying)
    body, headers = attack(payment_of(paying))
    response = deliver(http, callback, body, headers)
    assert_problem(response, status, code)
    assert callback_state(paying) == before
