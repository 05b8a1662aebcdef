"""HTTP answers the engine gives by itself: replays and problem+json refusals (DESIGN §4)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from django.http import HttpResponse

from idempotency.core.conf import engine_setting
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
    """409 while the first request with the key runs. ``Retry-After`` is at most
    ``IN_PROGRESS_RETRY_AFTER_SECONDS`` (the first request usually ends well within it), less
    when the lease ``retry_after_ms`` ends sooner, and never under 1 s: the lease is only the
    bound after which a crashed request's key is free, and asking for it (30 s by default)
    would make clients wait long after the first request has answered."""
    seconds = engine_setting("IN_PROGRESS_RETRY_AFTER_SECONDS")
    if retry_after_ms is not None:
        seconds = min(seconds, math.ceil(retry_after_ms / 1000))
    response = problem(
        409,
        IdempotencyErrorCode.IN_PROGRESS,
        "A request with this Idempotency-Key is still being processed; retry later.",
    )
    response["Retry-After"] = str(max(1, seconds))
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
