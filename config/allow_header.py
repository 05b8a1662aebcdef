"""``Allow`` on an API answer names the methods its route answers, OPTIONS not among them.

DRF writes ``Allow`` on every answer of an API view from the handlers the view class has, and
every ``APIView`` has an ``options`` handler. But the API has no metadata class (the OpenAPI
schema describes it: ``REST_FRAMEWORK["DEFAULT_METADATA_CLASS"]`` is None), so that handler
answers 405: a client that believed ``Allow`` would be refused. This takes OPTIONS out of the
header on ``/api/`` paths while no metadata class is configured.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from rest_framework.settings import api_settings

from config.api_error_pages import is_api_path


class AllowWithoutOptionsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Allow" in response and is_api_path(request) and not api_settings.DEFAULT_METADATA_CLASS:
            methods = [m.strip() for m in response["Allow"].split(",")]
            response["Allow"] = ", ".join(m for m in methods if m and m != "OPTIONS")
        return response
