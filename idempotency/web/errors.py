"""The engine's own API views answer every refusal as problem+json, in any host.

Their OpenAPI description (:func:`idempotency.web.openapi.problems`) promises problem+json with
a machine-readable ``code`` for each refusal. A host that keeps DRF's exception handler got
DRF's ``{"detail": …}`` as ``application/json`` for the refusals DRF raises (invalid input, a
caller the site does not identify, the write rate limit), and Django's HTML page for a body
over ``DATA_UPLOAD_MAX_MEMORY_SIZE``. A host that sets its own ``EXCEPTION_HANDLER`` keeps it
for these views too: its API then speaks one dialect, its own.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from rest_framework import exceptions
from rest_framework.views import APIView, exception_handler

from idempotency.core import responses
from idempotency.core.error_codes import IdempotencyErrorCode

# DRF's own code, upper-cased, names every other refusal (PARSE_ERROR, PERMISSION_DENIED, …)
_CODES: list[tuple[type[Exception], str]] = [
    (exceptions.ValidationError, "VALIDATION_ERROR"),
    (exceptions.Throttled, IdempotencyErrorCode.RATE_LIMITED),
]


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """DRF's handler's decision (status, headers such as ``Retry-After`` and
    ``WWW-Authenticate``, the transaction rolled back), written as problem+json."""
    if isinstance(exc, RequestDataTooBig):
        return responses.problem(413, "REQUEST_TOO_LARGE", "Request body too large")
    decided = exception_handler(exc, context)
    if decided is None:
        return None
    code = next((c for t, c in _CODES if isinstance(exc, t)), None)
    if code is None:
        code = str(getattr(exc, "default_code", None) or "error").upper()
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        detail, extra["errors"] = "Invalid input", exc.detail
    else:
        detail = str(decided.data.get("detail", "")) if isinstance(decided.data, dict) else ""
    answer = responses.problem(decided.status_code, code, detail or code, **extra)
    for header, value in decided.items():
        if header.lower() != "content-type":
            answer[header] = value
    return answer


# DRF's JSON parser turns ValueError into ParseError (a 400) but lets RecursionError through:
# a body nested deeper than Python's recursion limit is as unreadable as "{"
NESTED_TOO_DEEPLY = "The request body is nested too deeply to be read."


class ProblemAPIView(APIView):
    """The engine's own views: refusals as problem+json unless the host handles them."""

    def handle_exception(self, exc: Exception) -> Any:
        """A body the parser could not read for its depth is a parse error, not a 500."""
        if isinstance(exc, RecursionError):
            exc = exceptions.ParseError(NESTED_TOO_DEEPLY)
        return super().handle_exception(exc)

    def get_exception_handler(self) -> Any:
        host = super().get_exception_handler()
        return problem_exception_handler if host is exception_handler else host
