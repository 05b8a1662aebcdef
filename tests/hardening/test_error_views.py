"""Errors that never reach a DRF view still answer in the API's problem+json shape on /api/
paths (``config/api_error_pages.py``), with DEBUG on (the demo) as off, and with the HTML pages
elsewhere."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils.translation import trans_real

from ordering.models import Order
from tests.hardening.conftest import World, assert_problem
from tests.support.database_gone import database_unreachable

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser() -> Client:
    """Production: Django's error handlers answer pages (DEBUG shows its technical pages)."""
    return Client(raise_request_exception=False)


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def api_caller(request: pytest.FixtureRequest, settings: object) -> Client:
    """API paths answer alike with DEBUG on and off."""
    settings.DEBUG = request.param
    return Client(raise_request_exception=False)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api/v1/nope/", id="unknown-route"),
        pytest.param("/api/v1/orders/abc/", id="non-numeric-id"),
        pytest.param("/api/v1/orders/-1/pay/", id="negative-id"),
        pytest.param("/api/v2/orders/", id="unknown-version"),
    ],
)
def test_an_unknown_api_path_is_a_problem_json_404(api_caller: Client, path: str) -> None:
    assert_problem(api_caller.get(path), 404, "NOT_FOUND")


def test_an_unknown_page_is_the_html_404(browser: Client) -> None:
    response = browser.get("/dashboard/nope/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert b"Not found" in response.content


def test_a_wrong_method_on_the_api_is_a_problem_json_405(
    api_caller: Client, world_a: World
) -> None:
    response = api_caller.delete("/api/v1/menu/", HTTP_AUTHORIZATION=world_a.auth())
    assert_problem(response, 405, "METHOD_NOT_ALLOWED")


@pytest.mark.parametrize(
    ("method", "path", "kind", "status"),
    [
        pytest.param("head", "/api/v1/orders/1/pay/", "diner", 405, id="head-post-only"),
        pytest.param("options", "/api/v1/orders/1/pay/", "diner", 405, id="options-post-only"),
        pytest.param("head", "/api/v1/diner-sessions/", "merchant", 405, id="head-sessions"),
        pytest.param("options", "/api/v1/menu/", "publishable", 405, id="options-get-route"),
        pytest.param("head", "/api/v1/menu/", "publishable", 200, id="head-get-route"),
        pytest.param("head", "/api/v1/orders/", "publishable", 403, id="head-as-its-get"),
    ],
)
def test_head_and_options_answer_as_the_route_does(
    api_caller: Client, world_a: World, method: str, path: str, kind: str, status: int
) -> None:
    """HEAD is the GET handler where there is one, else 405 like GET; OPTIONS is 405 (no
    metadata: the schema describes the API). Red when HEAD and OPTIONS take GET's capability
    on a route without GET: 403 PERMISSION_DENIED."""
    response = getattr(api_caller, method)(path, HTTP_AUTHORIZATION=world_a.auth(kind))
    assert response.status_code == status, response.content
    if status == 405:
        assert "POST" in response["Allow"] or "GET" in response["Allow"]
        if method == "options":
            assert_problem(response, 405, "METHOD_NOT_ALLOWED")
    # Allow names what the route answers: never OPTIONS, which is 405 (red: "..., OPTIONS")
    assert "OPTIONS" not in response.get("Allow", "")


@pytest.mark.parametrize(
    ("path", "kind", "allow"),
    [
        ("/api/v1/menu/", "publishable", "GET, HEAD"),
        ("/api/v1/orders/1/pay/", "diner", "POST"),
        ("/api/v1/orders/", "merchant", "GET, POST, HEAD"),
    ],
)
def test_allow_lists_exactly_the_methods_the_route_answers(
    api_caller: Client, world_a: World, path: str, kind: str, allow: str
) -> None:
    response = api_caller.options(path, HTTP_AUTHORIZATION=world_a.auth(kind))
    assert (response.status_code, response["Allow"]) == (405, allow)


def test_head_and_options_still_need_a_credential(api_caller: Client) -> None:
    for method in ("head", "options"):
        response = getattr(api_caller, method)("/api/v1/orders/1/pay/")
        assert response.status_code == 401, method


@pytest.mark.urls("tests.hardening.error_urls")
def test_a_crash_under_api_is_a_problem_json_500(api_caller: Client) -> None:
    body = assert_problem(api_caller.get("/api/v1/boom/"), 500, "SERVER_ERROR")
    assert "bug nobody caught" not in body["detail"]  # no internals leak


@pytest.mark.urls("tests.hardening.error_urls")
def test_a_crash_elsewhere_is_the_html_500(browser: Client) -> None:
    response = browser.get("/boom/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert b"bug nobody caught" not in response.content


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        pytest.param("post", "/api/schema/", {}, id="schema-post"),
        pytest.param("post", "/api/docs/", {}, id="docs-post"),
        pytest.param("get", "/api/schema/", {"HTTP_ACCEPT": "application/xml"}, id="schema-xml"),
        pytest.param("get", "/api/docs/", {"HTTP_ACCEPT": "application/xml"}, id="docs-xml"),
    ],
)
def test_the_schema_and_docs_views_answer_errors_as_problem_json(
    api_caller: Client, method: str, path: str, headers: dict[str, str]
) -> None:
    """Their own renderers are YAML and HTML; an error is the one JSON shape all the same
    (red with DRF's ``Response`` for problems: a YAML body, or the text "405 Method Not
    Allowed")."""
    response = getattr(api_caller, method)(path, **headers)
    assert response.status_code in (405, 406)
    assert_problem(response, response.status_code, CODES[response.status_code])


CODES = {405: "METHOD_NOT_ALLOWED", 406: "NOT_ACCEPTABLE"}
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(
    ("path", "auth"),
    [
        pytest.param("/api/v1/orders/", None, id="no-credential"),
        pytest.param("/api/v1/orders/1/", "merchant", id="not-found"),
        pytest.param("/api/v1/menu/", "publishable", id="success"),
    ],
)
def test_a_client_that_accepts_only_html_is_answered_406_problem_json(
    api_caller: Client, world_a: World, path: str, auth: str | None
) -> None:
    """The API renders JSON only: no browsable HTML page, for an answer or for an error."""
    headers = {"HTTP_AUTHORIZATION": world_a.auth(auth)} if auth else {}
    response = api_caller.get(path, HTTP_ACCEPT="text/html", **headers)
    assert_problem(response, 406, "NOT_ACCEPTABLE")


def test_a_browser_s_accept_header_gets_json(api_caller: Client, world_a: World) -> None:
    response = api_caller.get(
        "/api/v1/menu/", HTTP_ACCEPT=BROWSER_ACCEPT, HTTP_AUTHORIZATION=world_a.auth("publishable")
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    missing = api_caller.get(
        "/api/v1/orders/1/", HTTP_ACCEPT=BROWSER_ACCEPT, HTTP_AUTHORIZATION=world_a.auth("merchant")
    )
    assert_problem(missing, 404, "ORDER_NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("post", "/api/v1/orders", id="post-orders"),
        pytest.param("get", "/api/v1/orders", id="get-orders"),
        pytest.param("post", "/api/v1/orders/1/pay", id="post-pay"),
        pytest.param("get", "/api/v1/menu", id="get-menu"),
    ],
)
def test_an_api_path_without_its_slash_is_a_404_naming_it_never_a_redirect(
    api_caller: Client, world_a: World, method: str, path: str
) -> None:
    """A client following a 301 would send the POST again as a GET (the order silently a read
    of the list); with DEBUG on Django refused the POST with a 500 (red with Django's own
    ``CommonMiddleware``)."""
    order = {"items": [{"dish_id": world_a.dish.pk, "quantity": 1}], "payment_method": "card"}
    extra = {"data": order, "content_type": "application/json"} if method == "post" else {}
    response = getattr(api_caller, method)(
        path, HTTP_AUTHORIZATION=world_a.auth(), HTTP_IDEMPOTENCY_KEY="no-slash", **extra
    )
    body = assert_problem(response, 404, "NOT_FOUND")
    assert body["detail"] == f"No such API route: API paths end with a slash ({path}/)"
    assert "Location" not in response
    assert not Order.all_tenants.filter(tenant=world_a.tenant).exists()


# One parameter more than Django parses from a query string (DATA_UPLOAD_MAX_NUMBER_FIELDS),
# well within the request line gunicorn reads (4,094 bytes): "a&a&…&a" is 2,001 bytes.
TOO_MANY_PARAMETERS = "&".join(["a"] * 1001)


@pytest.mark.parametrize("path", ["/api/v1/menu/", "/api/v1/orders/", "/api/schema/"])
def test_a_query_of_more_parameters_than_are_read_is_a_problem_json_400(
    api_caller: Client, world_a: World, path: str
) -> None:
    """With DEBUG on (the demo) this was a 500 from the HTTP server, an HTML page: Django's
    technical error page reads the query again to show it, which raised again from inside
    the error handling, and no answer was made."""
    response = api_caller.get(
        f"{path}?{TOO_MANY_PARAMETERS}", HTTP_AUTHORIZATION=world_a.auth("merchant")
    )
    body = assert_problem(response, 400, "BAD_REQUEST")
    assert body["detail"] == "More than 1000 query parameters"


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_a_page_s_query_of_more_parameters_than_are_read_is_a_400(
    browser: Client, settings: object, debug: bool
) -> None:
    settings.DEBUG = debug
    response = browser.get(f"/dashboard/login/?{TOO_MANY_PARAMETERS}")
    assert response.status_code == 400
    assert response.content == b"More than 1000 query parameters"


def test_a_page_without_its_slash_is_still_redirected(browser: Client) -> None:
    response = browser.get("/dashboard")
    assert (response.status_code, response["Location"]) == (301, "/dashboard/")


def test_an_order_placed_from_a_browser_replays_byte_for_byte_to_any_client(
    api_caller: Client, world_a: World
) -> None:
    """The first answer is JSON whatever the Accept header preferred, so the stored reply and
    every replay are that answer (red with DRF's browsable API: an HTML first answer, then a
    JSON body labelled text/html)."""
    order = {"items": [{"dish_id": world_a.dish.pk, "quantity": 1}], "payment_method": "card"}
    answers = [
        api_caller.post(
            "/api/v1/orders/",
            data=order,
            content_type="application/json",
            HTTP_ACCEPT=accept,
            HTTP_AUTHORIZATION=world_a.auth(),
            HTTP_IDEMPOTENCY_KEY="from-a-browser",
        )
        for accept in (BROWSER_ACCEPT, "application/json", "*/*")
    ]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert [a["X-Idempotent-Result"] for a in answers] == ["MISS", "HIT", "HIT"]
    assert {a["Content-Type"] for a in answers} == {"application/json"}
    assert answers[1].content == answers[2].content == answers[0].content


@pytest.mark.parametrize("version", ["a\x00b", "a\r\nX-Injected: 1", 'a"b', "v2"])
def test_the_schema_ignores_a_version_parameter(api_caller: Client, version: str) -> None:
    # drf-spectacular wrote it into the Content-Disposition file name: a control character
    # was a 500 for anyone, a quote broke the name
    response = api_caller.get("/api/schema/", {"version": version})
    assert response.status_code == 200
    assert response["Content-Disposition"] == api_caller.get("/api/schema/")["Content-Disposition"]
    assert "X-Injected" not in response


def test_the_schema_keeps_nothing_for_a_language_the_site_does_not_have() -> None:
    # ?lang= was handed to translation.override() as it came: Django keeps the catalogue of
    # every language code it is given for the life of the process, so each new value
    # (?lang=zz1, zz2, ...) held some 20 KB of every worker for good, for anyone
    caller = Client()
    english = caller.get("/api/schema/").content
    caller.get("/api/schema/", {"lang": "de"})
    before = set(trans_real._translations)

    answers = [caller.get("/api/schema/", {"lang": f"zz{n}"}) for n in range(20)]
    answers += [caller.get("/api/schema/", {"lang": code}) for code in ("DE", "de-AT", "x" * 300)]

    assert [a.status_code for a in answers] == [200] * len(answers)
    assert all(a.content == english for a in answers[:20])  # no such language: the default
    assert set(trans_real._translations) == before


def served_operations(caller: Client) -> list[tuple[str, str, dict]]:
    """(method, a concrete path, the operation) for every operation the served schema lists."""
    schema = caller.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    return [
        (method, path.replace("{order_id}", "1").replace("{diner_id}", "someone"), operation)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


# A POST without a body: the test client's default one is a form, which every write refuses
# 415 before anything else looks at the request (config/json_bodies.py).
NO_BODY = {"post": {"data": b"", "content_type": "application/json"}}


def test_every_operation_declares_the_refusals_it_answers_before_any_view(
    api_caller: Client, settings: object
) -> None:
    # 406 (DRF negotiates before it authenticates) and 413 (a middleware, before any view) came
    # from every operation, and the schema declared neither on any. The 413 is every method's,
    # a GET's with a body too, and so is the 400 of a Host this site does not serve (Django's
    # host check, before any view): the schema declared them on writes, or on none. The 411 of
    # a chunked body the server has not decoded (the demo's) is every method's as well.
    settings.MAX_REQUEST_BYTES = 64
    undeclared = []
    for method, path, operation in served_operations(api_caller):
        send = getattr(api_caller, method)
        refused = send(path, **NO_BODY.get(method, {}), HTTP_ACCEPT="application/xml")
        assert_problem(refused, 406, "NOT_ACCEPTABLE")
        foreign = send(path, **NO_BODY.get(method, {}), HTTP_HOST="evil.example")
        assert_problem(foreign, 400, "BAD_REQUEST")
        too_large = api_caller.generic(
            method.upper(), path, "{" + " " * 100 + "}", content_type="application/json"
        )
        assert_problem(too_large, 413, "REQUEST_TOO_LARGE")
        # the test client's server, as the development server, hands chunks on undecoded
        undecoded = api_caller.generic(method.upper(), path, HTTP_TRANSFER_ENCODING="chunked")
        assert_problem(undecoded, 411, "LENGTH_REQUIRED")
        for status in ("400", "406", "411", "413"):
            declared = operation["responses"].get(status)
            if not declared or "application/problem+json" not in declared.get("content", {}):
                undeclared.append(f"{method.upper()} {path}: {status}")
    assert not undeclared, undeclared


def test_every_operation_declares_the_503_it_answers_while_the_database_is_down(
    api_caller: Client,
) -> None:
    """Every operation reads PostgreSQL (its caller's credential, at least) and answers 503
    DATABASE_UNAVAILABLE while it cannot be reached; the schema declared a 503 on three."""
    operations = served_operations(api_caller)
    undeclared = []
    with database_unreachable():
        for method, path, _ in operations:
            if path == "/api/v1/payments/callback/":
                continue  # an unsigned callback is refused before anything is read
            answer = getattr(api_caller, method)(
                path, **NO_BODY.get(method, {}), HTTP_AUTHORIZATION="Api-Key abcdef123456.secret"
            )
            assert_problem(answer, 503, "DATABASE_UNAVAILABLE")
            assert answer["Retry-After"] == "5"
    for method, path, operation in operations:
        declared = operation["responses"].get("503", {})
        if "application/problem+json" not in declared.get("content", {}) or (
            "Retry-After" not in declared.get("headers", {})
        ):
            undeclared.append(f"{method.upper()} {path}")
    assert not undeclared, undeclared


def test_every_operation_declares_the_403_it_answers_over_plain_http(
    api_caller: Client, settings: object
) -> None:
    """With ``SECURE_SSL_REDIRECT`` on (production's default) every ``/api/v1/`` operation
    refuses plain HTTP 403 ``HTTPS_REQUIRED`` before any view; the payment callback, which
    declares no 403 of its own, did not declare it, so an integration generated from the schema
    took it for an answer the API never gives."""
    operations = served_operations(api_caller)
    settings.SECURE_SSL_REDIRECT = True
    undeclared = []
    for method, path, operation in operations:
        refused = getattr(api_caller, method)(path, **NO_BODY.get(method, {}))
        assert_problem(refused, 403, "HTTPS_REQUIRED")
        declared = operation["responses"].get("403", {})
        if "application/problem+json" not in declared.get("content", {}):
            undeclared.append(f"{method.upper()} {path}")
    assert not undeclared, undeclared
