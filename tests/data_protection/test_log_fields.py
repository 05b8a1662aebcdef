"""A tenant chooses which optional fields the log lines of its requests keep
(``Tenant.log_fields`` among ``settings.LOG_FIELDS_TENANT_MAY_KEEP``)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from config.logging import JsonFormatter
from config.request_context import RequestContextMiddleware
from tenants.api_keys import issue_api_key
from tenants.authentication import ApiKeyAuthentication
from tenants.models import ApiClient, Tenant

pytestmark = pytest.mark.django_db
LOGGER = "test.tenant_logs"
ALWAYS = {"ts", "level", "logger", "msg", "tenant"}


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)


def view(request: HttpRequest) -> HttpResponse:
    ApiKeyAuthentication().authenticate(request)  # sets the tenant of the request's logs
    logging.getLogger(LOGGER).info(
        "placing", extra={"order_id": "7", "diner_id": "d-1", "dish": "pizza"}
    )
    return HttpResponse("ok")


def request_of(tenant: Tenant) -> None:
    """One API request of ``tenant`` (a merchant key) that logs one line."""
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    request = RequestFactory().post(
        "/x",
        HTTP_AUTHORIZATION=f"Api-Key {key}",
        HTTP_X_REQUEST_ID="req-12345678",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )
    RequestContextMiddleware(view)(request)


def test_each_tenant_keeps_the_log_fields_it_chose(make_tenant, log_stream):
    request_of(make_tenant("keeps-none", log_fields=[]))
    request_of(make_tenant("keeps-request-id", log_fields=["request_id"]))
    request_of(make_tenant("keeps-default"))
    none, request_id_only, default = (json.loads(x) for x in log_stream.getvalue().splitlines())
    # a field the platform does not let tenants drop ("dish") is always kept
    assert set(none) == ALWAYS | {"dish"}
    assert set(request_id_only) == ALWAYS | {"dish", "request_id"}
    assert set(default) == ALWAYS | {
        "dish", "request_id", "idempotency_key_hmac", "order_id", "diner_id",
    }  # fmt: skip
