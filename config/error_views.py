"""Django's last-resort error pages, in the API's problem+json shape for ``/api/`` paths.

DRF answers the errors raised inside API views itself (``config/api_errors.py``). These handlers
cover what never reaches a DRF view: a URL that matches no route (``/api/v1/orders/abc/``) and an
exception that escaped everything (a 500). API clients then still get a ``code`` to act on;
browsers keep the HTML pages (``templates/404.html``, Django's default 500 page).

Django calls them only when ``DEBUG`` is off; with ``DEBUG`` on it shows its technical pages.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from config.api_errors import PROBLEM_JSON


def is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def problem(status: int, code: str, detail: str) -> HttpResponse:
    body = {"code": code, "detail": detail, "status": status}
    return HttpResponse(json.dumps(body), status=status, content_type=PROBLEM_JSON)


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_path(request):
        return problem(404, "NOT_FOUND", "Not found")
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if is_api_path(request):
        return problem(500, "SERVER_ERROR", "Internal server error; retry later")
    return defaults.server_error(request)
