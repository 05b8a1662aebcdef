"""Per-request context for logs: a request id, the tenant, and a hash of the idempotency key.

The middleware takes ``X-Request-ID`` from the caller when it is a sane token (or makes one),
echoes it in the response, and keeps it in a context variable together with the tenant (set by
authentication) and a keyed hash of the ``Idempotency-Key`` (never the key itself: keys may
be guessable and they are the client's secret handle on its operations): the same
``k<id>:<hmac>`` the audits keep (``idempotency.core.hashing``), so a log line and an audit
of one request can be matched. The id is also put on the request (``request.request_id``) for
the engine's audit metadata. The JSON log
formatter (``config/logging.py``) adds them to every line logged while the request runs, less
the optional fields the tenant chose not to keep.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace

from django.http import HttpRequest, HttpResponse

from idempotency.core.hashing import keyed_digest

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    tenant: str = ""
    idempotency_key_hash: str = ""
    # The tenant's choice among settings.LOG_FIELDS_TENANT_MAY_KEEP (Tenant.log_fields);
    # None: keep them all.
    log_fields: frozenset[str] | None = None


# RequestContext is frozen, so sharing the default instance is safe.
_context: ContextVar[RequestContext] = ContextVar("request_context", default=RequestContext())  # noqa: B039


def current() -> RequestContext:
    return _context.get()


def set_tenant(tenant: str, *, log_fields: list[str] | None = None) -> None:
    """The request acts for ``tenant``; its log lines keep only the optional fields the tenant
    keeps (``log_fields``; None: all of them)."""
    kept = frozenset(log_fields) if log_fields is not None else None
    _context.set(replace(_context.get(), tenant=tenant, log_fields=kept))


class RequestContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.META.get("HTTP_X_REQUEST_ID", "")
        request_id = given if REQUEST_ID_RE.fullmatch(given) else uuid.uuid4().hex
        key = request.META.get("HTTP_IDEMPOTENCY_KEY")
        key_hash = keyed_digest(key) if key else ""
        token = _context.set(RequestContext(request_id=request_id, idempotency_key_hash=key_hash))
        request.request_id = request_id  # type: ignore[attr-defined]  # for audit metadata
        try:
            response = self.get_response(request)
        finally:
            # Django logs a 4xx or 5xx (django.request) after this middleware has returned:
            # the formatter finds the request's context on the request it logs
            request.log_context = _context.get()  # type: ignore[attr-defined]
            _context.reset(token)
        response["X-Request-ID"] = request_id
        return response
