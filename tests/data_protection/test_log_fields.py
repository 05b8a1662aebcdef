"""A tenant chooses which optional fields the log lines of its requests keep
(``Tenant.log_fields`` among ``settings.LOG_FIELDS_TENANT_MAY_KEEP``)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.utils.module_loading import import_string

from config.logging import JsonFormatter
from config.request_context import RequestContextMiddleware
from tenants.api_keys import issue_api_key
from tenants.authentication import ApiKeyAuthentication
from tenants.models import ApiClient, Tenant
from tests.support.development_server import development_server
from tests.support.live_server import live_gunicorn
from tests.support.waiting import DEADLINE_SECONDS, wait_until

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


@pytest.fixture
def request_lines() -> Iterator[io.StringIO]:
    """What Django logs about a request answered 4xx (``django.request``), as JSON lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("log_fields", "shown"),
    [
        ([], "/api/v1/diners/<diner_id>/revoke-sessions/"),
        (["order_id"], "/api/v1/diners/<diner_id>/revoke-sessions/"),
        (None, "/api/v1/diners/zoe.private/revoke-sessions/"),
    ],
    ids=["keeps-none", "keeps-order-id", "keeps-default"],
)
def test_a_request_line_names_the_diner_of_its_path_only_if_the_tenant_keeps_diner_ids(
    make_tenant, request_lines, log_fields, shown
):
    """Red when the path went into the line as sent: a tenant that keeps no diner ids in its
    logs had one in every 4xx line of ``/api/v1/diners/<id>/…``, in ``msg`` and ``request``."""
    tenant = make_tenant("logs", log_fields=log_fields)
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    # given a request of the tenant's key answered 405 (a GET where POST is expected)
    r = Client().get(
        "/api/v1/diners/zoe.private/revoke-sessions/", HTTP_AUTHORIZATION=f"Api-Key {key}"
    )
    assert r.status_code == 405
    [line] = [json.loads(x) for x in request_lines.getvalue().splitlines()]
    assert line["msg"] == f"Method Not Allowed: {shown}"
    assert line["request"] == f"<WSGIRequest: GET '{shown}'>"
    assert line["tenant"] == str(tenant.pk)


def test_a_request_line_names_the_order_of_its_path_only_if_the_tenant_keeps_order_ids(
    make_tenant, request_lines
):
    kept, dropped = (
        make_tenant("keeps", log_fields=["order_id"]),
        make_tenant("drops", log_fields=[]),
    )
    for tenant in (kept, dropped):
        _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
        r = Client().get("/api/v1/orders/12345/pay/", HTTP_AUTHORIZATION=f"Api-Key {key}")
        assert r.status_code == 405
    messages = [json.loads(x)["msg"] for x in request_lines.getvalue().splitlines()]
    assert messages == [
        "Method Not Allowed: /api/v1/orders/12345/pay/",
        "Method Not Allowed: /api/v1/orders/<order_id>/pay/",
    ]


@pytest.mark.parametrize(
    "refused",
    [
        pytest.param({"path": "?format=xml"}, id="format-406"),
        pytest.param({"HTTP_ACCEPT": "application/xml"}, id="accept-406"),
        pytest.param({"key": "nobody.s-key"}, id="unknown-key-401"),
    ],
)
def test_a_request_refused_before_its_tenant_is_known_names_no_diner_of_its_path(
    make_tenant, request_lines, refused
):
    """DRF refuses an answer format it cannot write before it authenticates, so the line had no
    tenant and kept the path as sent (red: the diner id of a tenant that keeps none in its
    logs, in msg and request); nor can a line whose credential was refused say whose it is."""
    tenant = make_tenant("logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    options = dict(refused)
    path = "/api/v1/diners/zoe.private/revoke-sessions/" + options.pop("path", "")
    credential = options.pop("key", key)
    r = Client().post(
        path, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Api-Key {credential}",
        **options,
    )  # fmt: skip
    assert r.status_code in (401, 406)
    [line] = [json.loads(x) for x in request_lines.getvalue().splitlines()]
    assert "zoe.private" not in json.dumps(line)
    assert line["msg"].endswith(": /api/v1/diners/<diner_id>/revoke-sessions/")


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        pytest.param(
            "/api/v1/diners/zoe.private/revoke-sessions",
            "/api/v1/diners/<diner_id>/revoke-sessions",
            id="no-trailing-slash",
        ),
        pytest.param("/api/v1/diners/zoe.private/", "/api/v1/diners/<diner_id>/", id="no-action"),
        pytest.param(
            "/api/v1/diners/zoe.private/revoke/", "/api/v1/diners/<diner_id>/revoke/", id="typo"
        ),
        pytest.param("/api/v1/orders/12345/payy/", "/api/v1/orders/<order_id>/payy/", id="order"),
        pytest.param("/api/v1/nowhere/zoe.private/", "/api/v1/nowhere/zoe.private/", id="no-route"),
        pytest.param(
            "/api/v1//diners/zoe.private/revoke-sessions/",
            "/api/v1//diners/<diner_id>/revoke-sessions/",
            id="doubled-slash",
        ),
        pytest.param(
            "/api//v1/orders//12345/pay/", "/api//v1/orders//<order_id>/pay/", id="doubled-slashes"
        ),
    ],
)
def test_a_path_that_matches_no_route_names_no_diner_where_a_route_takes_one(
    make_tenant, request_lines, sent, shown
):
    """A path no route matches is answered 404 before any tenant is known, and its line kept
    the path as sent: a client's mistyped or unslashed ``/api/v1/diners/<id>/…`` wrote the
    diner id of a tenant that keeps none in its logs. A part of it standing where a route of
    the site takes a diner id or an order id is now written as its name (a part no route
    names, as it was sent). A doubled slash (a client joining a base URL ending in ``/`` to a
    path starting with one) leaves every part where it stands: the parts are read past empty
    ones, as a route has none."""
    tenant = make_tenant("logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    r = Client().post(
        sent, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Api-Key {key}"
    )
    assert r.status_code == 404
    [line] = [json.loads(x) for x in request_lines.getvalue().splitlines()]
    assert line["msg"] == f"Not Found: {shown}"
    assert line["request"] == f"<WSGIRequest: POST '{shown}'>"


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param("/api/v1/nowhere/?diner=zoe.private", id="no-route"),
        pytest.param("/api/v1/orders/?status=zoe.private", id="bad-filter"),
    ],
)
def test_a_request_line_keeps_no_query_string(make_tenant, request_lines, sent):
    """Django's line about a refused request wrote the request as ``repr`` spells it, with
    its query string: what a client searched or filtered for (a diner's name or id) was kept
    in the log whatever the tenant chose. The line names the path only, as its
    ``msg`` always did."""
    tenant = make_tenant("logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    r = Client().get(sent, HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert r.status_code in (400, 404)
    lines = [json.loads(x) for x in request_lines.getvalue().splitlines()]
    assert lines, "no line about the refused request"
    path = sent.partition("?")[0]
    for line in lines:
        assert "zoe.private" not in json.dumps(line)
        assert line["request"] == f"<WSGIRequest: GET '{path}'>"


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        pytest.param(
            "/api/v1/diners/zo\u00eb.private/revoke-sessions/",
            "Bad Request: /api/v1/diners/<diner_id>/revoke-sessions/",
            id="routed-id-not-ascii",
        ),
        pytest.param(
            "/api/v1/diners/zoe.private/revoke-sessions/\u00e9",
            "Not Found: /api/v1/diners/<diner_id>/revoke-sessions/\\xe9",
            id="unrouted-part-not-ascii",
        ),
        pytest.param(
            "/api/v1/orders/12345/pay\u00e9/",
            "Not Found: /api/v1/orders/<order_id>/pay\\xe9/",
            id="order-part-not-ascii",
        ),
    ],
)
def test_a_path_django_escapes_in_its_line_names_no_diner_the_tenant_drops(
    make_tenant, request_lines, sent, shown
):
    """Django writes a refused request's path into its line escaped (``unicode_escape``: a
    letter outside ASCII as ``\\xe9``), so the path as the request holds it was not found in
    ``msg`` to be masked there: a tenant that keeps no diner or order ids in its logs had the
    id of ``/api/v1/diners/<id>/…`` in the line whenever the path held such a letter."""
    tenant = make_tenant("logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    r = Client().post(
        sent, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Api-Key {key}"
    )
    assert r.status_code in (400, 404)
    [line] = [json.loads(x) for x in request_lines.getvalue().splitlines()]
    assert line["msg"] == shown
    assert "zo" not in line["msg"] and "12345" not in json.dumps(line)
    assert "zo\u00eb" not in line["request"] and "zoe" not in line["request"]


def configured_formatter(log_format: str) -> logging.Formatter:
    """The formatter ``LOG_FORMAT=<log_format>`` gives the console handler (settings.LOGGING)."""
    spec = dict(settings.LOGGING["formatters"][log_format])
    factory = spec.pop("()", None)
    return import_string(factory)(**spec) if factory else logging.Formatter(**spec)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_request_line_in_either_log_format_names_no_diner_the_tenant_drops(
    make_tenant, log_format
):
    """``LOG_FORMAT=text`` wrote Django's line about a refused request with its path as sent:
    the diner id of a tenant that keeps none in its logs, in every 4xx line of
    ``/api/v1/diners/<id>/…``, which the JSON lines write as its name."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(configured_formatter(log_format))
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    tenant = make_tenant("logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    try:
        r = Client().get(
            "/api/v1/diners/zoe.private/revoke-sessions/", HTTP_AUTHORIZATION=f"Api-Key {key}"
        )
    finally:
        logger.removeHandler(handler)
    assert r.status_code == 405
    [line] = stream.getvalue().splitlines()
    assert "zoe.private" not in line
    assert "Method Not Allowed: /api/v1/diners/<diner_id>/revoke-sessions/" in line


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_served_request_is_logged_once_and_names_no_diner_the_tenant_drops(tmp_path, log_format):
    """A real gunicorn, as the demo and the tests run it (``DEBUG=1``): Django's own console
    handler for its ``django`` loggers printed a second, plain copy of the line about a refused
    request, with the path as sent. The diner id of a tenant that keeps none in its logs was
    in every 4xx line of ``/api/v1/diners/<id>/…``, and a JSON log held a line that was no
    JSON. Each line now goes through the configured formatter alone, once."""
    tenant = Tenant.objects.create(slug="logs", name="Logs", log_fields=[])
    _, key = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path,
        env={"DEBUG": "1", "LOG_FORMAT": log_format},
        workers=1,
    ) as server:
        # given a request of the tenant's key answered 405 (a GET where POST is expected)
        r = httpx.get(
            f"{server.url}/api/v1/diners/zoe.private/revoke-sessions/",
            headers={"Authorization": f"Api-Key {key}"},
            timeout=DEADLINE_SECONDS,
        )
        assert r.status_code == 405
        masked = "Method Not Allowed: /api/v1/diners/<diner_id>/revoke-sessions/"
        wait_until(
            lambda: masked in server.log_path.read_text(),
            what="the line about the refused request",
            detail=server.log_tail,
        )
    written = server.log_path.read_text()
    assert "zoe.private" not in written
    lines = [line for line in written.splitlines() if "Method Not Allowed" in line]
    assert len(lines) == 1, lines
    if log_format == "json":
        assert json.loads(lines[0])["msg"] == masked


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_demo_server_s_request_lines_name_no_diner(tmp_path):
    """``make run`` serves with Django's development server, whose own logger
    (``django.server``) wrote a line for every request with its path as sent, whatever the
    tenant chose (``"POST /api/v1/diners/zoe.private/revoke-sessions/ HTTP/1.1" 200``), and
    in JSON the socket it came in on, the client's address and port. The path is now written
    as the lines about requests refused before their tenant was known write it, and the
    socket is left out."""
    with development_server(tmp_path / "runserver.log") as server:
        for path in ("/api/v1/diners/zoe.private/revoke-sessions/", "/api/v1/orders/12345/"):
            httpx.post(f"{server.url}{path}?x=1", timeout=DEADLINE_SECONDS)
        wait_until(
            lambda: server.log_path.read_text().count('"logger": "django.server"') >= 3,
            what="the development server's request lines",
            detail=server.log_path.read_text,
        )
    written = server.log_path.read_text()
    assert "zoe.private" not in written and "12345" not in written
    lines = [json.loads(x) for x in written.splitlines() if '"django.server"' in x]
    assert [line["msg"].rpartition(" ")[0] for line in lines[-2:]] == [
        '"POST /api/v1/diners/<diner_id>/revoke-sessions/?x=1 HTTP/1.1" 401',
        '"POST /api/v1/orders/<order_id>/?x=1 HTTP/1.1" 401',
    ]
    # nor the socket the request came in on: the client's address and port
    assert not any("request" in line for line in lines)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_access_log_names_no_client_address_referer_or_user_agent(tmp_path):
    """``GUNICORN_ACCESS_LOG`` on: gunicorn's default line format wrote the client's address,
    its referer and its user agent beside the request line, personal data no other line of
    the product keeps. The line holds the request, its status, size and time taken."""
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path,
        workers=1,
        access_log_format=None,  # config/gunicorn.py's
    ) as server:
        access_log = server.access_log_path
        r = httpx.get(
            f"{server.url}/api/v1/menu/?marker=access-line",
            headers={"User-Agent": "agent-of-a-diner/1.0", "Referer": "https://referer.test/x"},
            timeout=DEADLINE_SECONDS,
        )
        assert r.status_code == 401
        wait_until(
            lambda: access_log.exists() and "marker=access-line" in access_log.read_text(),
            what="the access line of the request",
            detail=server.log_tail,
        )
    [line] = [line for line in access_log.read_text().splitlines() if "access-line" in line]
    assert '"GET /api/v1/menu/?marker=access-line HTTP/1.1" 401' in line
    for personal in ("127.0.0.1", "agent-of-a-diner", "referer.test"):
        assert personal not in line, line
