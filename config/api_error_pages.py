"""Every error answer on an ``/api/`` path is problem+json, whatever produced it, DEBUG or not.

DRF answers the errors raised inside API views itself (``config/api_errors.py``). What never
reaches a DRF view is answered by Django: a URL that matches no route (``/api/v1/orders/abc/``),
a Host header it refuses (400), an exception that escaped everything (500). Django renders those
as HTML pages, and with ``DEBUG`` on as its technical pages, bypassing the error handlers: so
the demo (which runs in DEBUG) would show API clients HTML where the docs promise a ``code``.

This middleware sits outside everything that can answer such a page and replaces any error
answer on an API path that is not JSON already by the problem for its status
(:data:`config.api_errors.CODE_FOR_STATUS`). JSON error bodies (the views' own problems, the
engine's, replays of stored answers) pass untouched. Other paths keep Django's HTML pages.
The exception itself was already logged by Django (``django.request``) before this runs.

An API path without its trailing slash (``POST /api/v1/orders``) is not redirected to the
slashed one, as Django's ``APPEND_SLASH`` does for pages (:class:`CommonMiddleware`): a client
that follows a 301 sends a POST again as a GET, so an order would silently become a read of
the list, and with ``DEBUG`` on Django refuses the POST with a 500. It is a 404 ``NOT_FOUND``
whose ``detail`` names the path with the slash.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.middleware import common
from django.urls import get_urlconf, is_valid_path

from config.api_errors import code_for_status, problem_http_response

API_PREFIX = "/api/"
# Headers of the replaced answer that still mean something to the client: what to send next,
# and the security headers Django's SecurityMiddleware set on it (HSTS, nosniff, ...), which
# a problem built here would otherwise go without.
KEPT_HEADERS = (
    "Allow",
    "Retry-After",
    "WWW-Authenticate",
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
)


def is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


class ApiErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not is_api_path(request):
            return response
        if "json" in response.get("Content-Type", ""):
            return response
        code, detail = code_for_status(response.status_code)
        if response.status_code == 404 and _slash_missing(request):
            detail = f"No such API route: API paths end with a slash ({request.path}/)"
        problem = problem_http_response(response.status_code, code, detail)
        for name in KEPT_HEADERS:
            if name in response:
                problem[name] = response[name]
        return problem


class CommonMiddleware(common.CommonMiddleware):
    """Django's, but an API path is never redirected to the one with a slash (module docstring)."""

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        return not is_api_path(request) and super().should_redirect_with_slash(request)


def _slash_missing(request: HttpRequest) -> bool:
    path = request.path_info
    urlconf = getattr(request, "urlconf", get_urlconf())
    return not path.endswith("/") and is_valid_path(f"{path}/", urlconf)
