"""One API writes its errors one way, whichever layer refuses: a middleware before any view
(config/api_errors.problem_http_response), the idempotency engine, or a view through DRF.

A client comparing bytes, or a log reading them, met `{"code": "…"}` from the first two and
`{"code":"…"}` from the third (red: the middleware's 415 and the engine's 400 had spaces)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tenants.models import Tenant
from tests.support.auth import diner_token

pytestmark = pytest.mark.django_db
ORDERS = "/api/v1/orders/"


def compact(body: bytes) -> bytes:
    """The body as DRF's JSON renderer writes it: no spaces between tokens, UTF-8."""
    return json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False).encode()


def test_a_refusal_of_every_layer_is_written_as_the_views_write_theirs() -> None:
    tenant = Tenant.objects.create(slug="bytes", name="Bytes")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {diner_token(tenant)}"}
    client = Client()
    refusals = {
        # the JSON-only middleware, before the view
        "middleware": client.post(ORDERS, b"a=b", content_type="text/plain", **auth),
        # the engine: no Idempotency-Key on a write that needs one
        "engine": client.post(ORDERS, {}, content_type="application/json", **auth),
        # the view's own validation, through DRF
        "view": client.post(
            ORDERS,
            {"items": []},
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="k-bytes",
            **auth,
        ),
    }
    assert {layer: r.status_code for layer, r in refusals.items()} == {
        "middleware": 415,
        "engine": 400,
        "view": 400,
    }
    assert {layer: r.content == compact(r.content) for layer, r in refusals.items()} == {
        "middleware": True,
        "engine": True,
        "view": True,
    }
