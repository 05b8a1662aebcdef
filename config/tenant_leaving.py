"""A change refused by the offboarding fence answers 409 with a page saying so, not a 500.

The fence (:mod:`tenants.write_fence`) refuses every write of a row of a tenant being
offboarded. The API answers that refusal 403 ``TENANT_SUSPENDED`` (``config/api_errors.py``)
and the dashboard with the page of a suspended restaurant (``ordering/dashboard/access.py``);
anywhere else (the admin's change forms: a dish, a coupon, a membership of a leaving
restaurant, an action over its rows) it was a 500, "a bug on our side", logged with a
traceback. The refused write was rolled back, and the page says why; a change form saves in one
transaction, so nothing of it was saved.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from config.api_error_pages import is_api_path
from tenants.write_fence import refused_by_fence


class TenantLeavingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_api_path(request) or not refused_by_fence(exception):
            return None  # the API's exception handler answers its own
        return HttpResponse(render_to_string("409_tenant_leaving.html"), status=409)
