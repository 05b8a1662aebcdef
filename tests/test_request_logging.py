"""Structured JSON logs carry the request id, the tenant and a hash of the idempotency key."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from config.logging import JsonFormatter
from config.request_context import RequestContextMiddleware, set_tenant
from idempotency.core.hashing import keyed_digest


@pytest.fixture
def log_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.request")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)


def view(request):
    set_tenant("42")
    logging.getLogger("test.request").info("placing", extra={"order_id": "7"})
    return HttpResponse("ok")


def test_log_line_has_request_context_and_never_the_raw_key(log_lines):
    request = RequestFactory().post(
        "/x", HTTP_X_REQUEST_ID="req-12345678", HTTP_IDEMPOTENCY_KEY="secret-key-1"
    )
    response = RequestContextMiddleware(view)(request)
    [line] = log_lines()
    assert response["X-Request-ID"] == "req-12345678"
    assert line["msg"] == "placing" and line["order_id"] == "7" and line["level"] == "INFO"
    assert line["request_id"] == "req-12345678" and line["tenant"] == "42"
    assert line["idempotency_key_hmac"] == keyed_digest("secret-key-1")
    assert "secret-key-1" not in json.dumps(line)


def test_a_hostile_request_id_is_replaced(log_lines):
    request = RequestFactory().get("/x", HTTP_X_REQUEST_ID="bad id\nwith newline")
    response = RequestContextMiddleware(view)(request)
    assert len(response["X-Request-ID"]) == 32 and "\n" not in response["X-Request-ID"]
    assert log_lines()[0]["request_id"] == response["X-Request-ID"]


def test_django_s_line_about_a_refused_request_carries_its_context(client, settings, db):
    """Django logs a 4xx (django.request) after the middleware has returned; the line still
    names the request and its key's hash (red without the context left on the request: no
    request_id)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        response = client.get(
            "/api/v1/orders/abc/",
            HTTP_X_REQUEST_ID="req-refused-1",
            HTTP_IDEMPOTENCY_KEY="secret-key-2",
        )
    finally:
        logger.removeHandler(handler)
    assert response.status_code == 404
    [line] = [json.loads(raw) for raw in stream.getvalue().splitlines()]
    assert line["logger"] == "django.request" and line["status_code"] == 404
    assert line["request_id"] == "req-refused-1"
    assert line["idempotency_key_hmac"] == keyed_digest("secret-key-2")
