"""Errors that never reach a DRF view still answer in the API's problem+json shape on /api/
paths (``config/api_error_pages.py``), with DEBUG on (the demo) as off, and with the HTML pages
elsewhere."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.hardening.conftest import World, assert_problem

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
