"""One JSON error shape for the whole API (RFC 9457 problem+json with a ``code`` member).

Every error body looks like ``{"code": "ORDER_STATUS_CONFLICT", "detail": "...", "status": 409}``
plus optional members (``errors`` for field validation). Services raise :class:`ApiError` (or a
subclass carrying its own code); DRF's own exceptions are mapped to codes here so that clients
never have to parse English text.

Messages may echo client input (DRF's ``'"<value>" is not a valid choice.'``): every string of an
error body is cut to its first :data:`ECHO_LIMIT` characters, so a 500 KB field costs a
few hundred bytes to answer, and to keep as the idempotency key's stored reply.
"""

from __future__ import annotations

import math
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpResponse
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from tenants.error_codes import TenantErrorCode
from tenants.write_fence import refused_by_fence

PROBLEM_JSON = "application/problem+json"
# Longest string an error body carries (messages, field names): a short prefix of any input.
ECHO_LIMIT = 200


class ApiError(exceptions.APIException):
    """An error with a machine-readable code, raised anywhere below a view."""

    def __init__(
        self,
        *,
        status_code: int,
        code: str,
        detail: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.error_code = code
        self.headers = headers or {}
        self.extra = extra


# The code of an error that has no more specific one: what Django itself answers before (or
# after) any API view ran, and an APIException nobody mapped.
CODE_FOR_STATUS: dict[int, tuple[str, str]] = {
    400: ("BAD_REQUEST", "Bad request"),
    403: ("PERMISSION_DENIED", "Permission denied"),
    404: ("NOT_FOUND", "Not found"),
    405: ("METHOD_NOT_ALLOWED", "Method not allowed"),
    406: ("NOT_ACCEPTABLE", "Cannot answer in the requested media type"),
    411: ("LENGTH_REQUIRED", "Send the body with its Content-Length"),
    413: ("REQUEST_TOO_LARGE", "Request body too large"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "Unsupported media type"),
    500: ("SERVER_ERROR", "Internal server error; retry later"),
}


def code_for_status(status_code: int) -> tuple[str, str]:
    """(code, detail) for a bare HTTP status: its own entry, else that of its class (4xx: 400,
    5xx: 500)."""
    fallback = 500 if status_code >= 500 else 400
    return CODE_FOR_STATUS.get(status_code, CODE_FOR_STATUS[fallback])


def problem_body(status_code: int, code: str, detail: str, **extra: Any) -> dict[str, Any]:
    """The one error shape: ``code``, ``detail``, ``status`` and optional extension members."""
    return _encodable({"code": code, "detail": detail, "status": status_code, **extra})


class ProblemResponse(Response):
    """A problem is JSON whichever renderer the view's content negotiation picked: the API
    renders JSON only, but the schema's view renders YAML and the docs page HTML, and a
    client's ``Accept`` must never turn an error into something that is not the one shape."""

    @property
    def rendered_content(self) -> bytes:
        self.accepted_renderer = _JSON
        self.accepted_media_type = PROBLEM_JSON
        return super().rendered_content


_JSON = JSONRenderer()


def problem_response(
    status_code: int, code: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """The problem as a DRF response (inside API views)."""
    body = problem_body(status_code, code, detail, **extra)
    return ProblemResponse(body, status=status_code, headers=headers, content_type=PROBLEM_JSON)


def problem_http_response(status_code: int, code: str, detail: str, **extra: Any) -> HttpResponse:
    """The problem as a plain Django response (middleware, outside DRF), written by the JSON
    renderer the API's views answer with: one API, one way of writing JSON (no spaces, UTF-8)."""
    body = problem_body(status_code, code, detail, **extra)
    return HttpResponse(_JSON.render(body), status=status_code, content_type=PROBLEM_JSON)


# Invalid input: a field is missing, of the wrong type or out of range (``errors`` names them)
VALIDATION_ERROR = "VALIDATION_ERROR"
# The codes of DRF's own refusals
DRF_CODES: list[tuple[type[Exception], str]] = [
    (exceptions.ParseError, "INVALID_JSON"),
    (exceptions.UnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE"),
    (exceptions.NotAuthenticated, "API_KEY_MISSING"),
    (exceptions.AuthenticationFailed, "API_KEY_INVALID"),
    (exceptions.PermissionDenied, "PERMISSION_DENIED"),
    (exceptions.NotFound, "NOT_FOUND"),
    (exceptions.MethodNotAllowed, "METHOD_NOT_ALLOWED"),
    (exceptions.NotAcceptable, "NOT_ACCEPTABLE"),
    (exceptions.Throttled, "RATE_LIMITED"),
]


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: map every failure to the shared problem shape."""
    if isinstance(exc, ApiError):
        headers = {**_auth_header(exc), **exc.headers}
        return problem_response(
            exc.status_code, exc.error_code, str(exc.detail), headers=headers, **exc.extra
        )
    if isinstance(exc, RequestDataTooBig):
        return problem_response(
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, "REQUEST_TOO_LARGE", "Request body too large"
        )
    if isinstance(exc, Http404):
        return problem_response(404, "NOT_FOUND", "Not found")
    if refused_by_fence(exc):
        # authenticated before its tenant's offboarding began, written after: as a request
        # authenticated after it is answered
        return problem_response(403, TenantErrorCode.TENANT_SUSPENDED, "Tenant is suspended")
    if isinstance(exc, DjangoPermissionDenied):
        return problem_response(403, "PERMISSION_DENIED", "Permission denied")
    if isinstance(exc, exceptions.ValidationError):
        return problem_response(400, VALIDATION_ERROR, "Invalid input", errors=exc.detail)
    for exc_type, code in DRF_CODES:
        if isinstance(exc, exc_type):
            headers = _auth_header(exc)
            if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
                # whole seconds, rounded up (DRF's Throttled and the engine's RateLimited)
                headers["Retry-After"] = str(math.ceil(exc.wait))
            detail = str(exc.detail)
            if isinstance(exc, exceptions.UnsupportedMediaType):
                detail += " Request bodies are JSON only (Content-Type: application/json)."
            return problem_response(exc.status_code, code, detail, headers=headers)
    if isinstance(exc, exceptions.APIException):
        code, _ = code_for_status(exc.status_code)
        return problem_response(exc.status_code, code, str(exc.detail))
    return None


def _auth_header(exc: Exception) -> dict[str, str]:
    if getattr(exc, "status_code", None) == 401:
        return {"WWW-Authenticate": "Api-Key, Bearer"}
    return {}


def clip(text: str) -> str:
    """``text``, or its first :data:`ECHO_LIMIT` characters and an ellipsis."""
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "…"


def _encodable(value: Any) -> Any:
    """Error bodies may echo client input (a field's value in a validation message): each
    string is clipped, and a lone surrogate, which could not be encoded as UTF-8, is shown
    escaped instead."""
    if isinstance(value, str):
        return clip(value).encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value
