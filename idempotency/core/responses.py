"""HTTP answers the engine gives by itself: replays and problem+json refusals (DESIGN §4)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from django.http import HttpResponse

from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.outcomes import StoredResponse

RESULT_HEADER = "X-Idempotent-Result"
REPLAYED_HEADER = "Idempotent-Replayed"
# Longest ``detail`` the engine sends: it may quote client input (a colliding field name).
DETAIL_LIMIT = 200


def problem(status: int, code: IdempotencyErrorCode, detail: str, **extra: object) -> HttpResponse:
    if len(detail) > DETAIL_LIMIT:
        detail = detail[:DETAIL_LIMIT] + "…"
    body = {"code": code.value, "detail": detail, "status": status, **extra}
    return HttpResponse(json.dumps(body), status=status, content_type="application/problem+json")


def replay(
    stored: StoredResponse, *, render_pointer: Callable[[str], HttpResponse] | None = None
) -> HttpResponse:
    """The stored status, allow-listed headers and body bytes, marked as a replay.

    A body that was too large to keep was stored as a pointer to the created resource; it is
    rendered afresh: the resource's current state, labelled with the ``Content-Type`` of that
    rendering (the first answer's may name another type, e.g. a page a browser negotiated),
    with the original status and other headers."""
    body = stored.body
    fresh = render_pointer(stored.pointer) if stored.pointer and render_pointer else None
    if fresh is not None:
        body = fresh.content
    response = HttpResponse(body, status=stored.status)
    del response["Content-Type"]
    for name, value in stored.headers:
        response[name] = value
    if fresh is not None and fresh.has_header("Content-Type"):
        response["Content-Type"] = fresh["Content-Type"]
    response[REPLAYED_HEADER] = "true"
    response[RESULT_HEADER] = "HIT"
    return response


def in_progress(retry_after_ms: int | None) -> HttpResponse:
    response = problem(
        409,
        IdempotencyErrorCode.IN_PROGRESS,
        "A request with this Idempotency-Key is still being processed; retry later.",
    )
    response["Retry-After"] = str(max(1, math.ceil((retry_after_ms or 1000) / 1000)))
    response[RESULT_HEADER] = "IN_PROGRESS"
    return response


def key_reused() -> HttpResponse:
    response = problem(
        422,
        IdempotencyErrorCode.KEY_REUSED,
        "This Idempotency-Key was already used with a different request payload.",
    )
    response[RESULT_HEADER] = "REUSED"
    return response
