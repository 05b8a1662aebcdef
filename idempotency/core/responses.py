"""HTTP answers the engine gives by itself: replays and problem+json refusals (DESIGN §4)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable

from django.http import HttpResponse

from idempotency.core.conf import engine_setting
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.outcomes import StoredResponse
from idempotency.core.replies import OMITTED_HEADER, UNKNOWN_SIZE

logger = logging.getLogger(__name__)

RESULT_HEADER = "X-Idempotent-Result"
REPLAYED_HEADER = "Idempotent-Replayed"
# Longest ``detail`` the engine sends: it may quote client input (a colliding field name).
DETAIL_LIMIT = 200


def problem(status: int, code: str, detail: str, **extra: object) -> HttpResponse:
    """A refusal as problem+json, written as DRF's JSON renderer writes an API's own errors
    (no spaces, UTF-8 rather than ``\\u`` escapes), so a client reading the bytes of one API
    meets one dialect whichever layer refused."""
    if len(detail) > DETAIL_LIMIT:
        detail = detail[:DETAIL_LIMIT] + "…"
    body = {"code": str(code), "detail": detail, "status": status, **extra}
    return HttpResponse(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
        status=status,
        content_type="application/problem+json",
    )


def replay(
    stored: StoredResponse, *, render_pointer: Callable[[str], HttpResponse | None] | None = None
) -> HttpResponse:
    """The stored status, allow-listed headers and body bytes, marked as a replay.

    A body that was too large to keep (or streamed) was stored as a pointer to the created
    resource; it is rendered afresh: the resource's current state, labelled with the
    ``Content-Type`` of that rendering (the first answer's may name another type, e.g. a page
    a browser negotiated), with the original status and other headers. When the resource
    cannot stand in for the first body (:func:`_render`), the replay is the marker a body kept
    without a pointer gets: the stored status and headers, no ``Content-Type``, an empty body
    and ``Idempotent-Body-Omitted``. Never a 404 or a 500 for an operation that succeeded,
    nor an error's body under its 2xx: a client told its create failed would create again."""
    if not stored.pointer:
        return _replayed(stored.status, stored.headers, stored.body)
    fresh = _render(stored.pointer, render_pointer)
    if fresh is None:
        return _replayed(stored.status, _body_omitted(stored), b"")
    response = _replayed(stored.status, _without(stored.headers, OMITTED_HEADER), fresh.content)
    if fresh.has_header("Content-Type"):
        response["Content-Type"] = fresh["Content-Type"]
    return response


def _replayed(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    del response["Content-Type"]
    for name, value in headers:
        response[name] = value
    response[REPLAYED_HEADER] = "true"
    response[RESULT_HEADER] = "HIT"
    return response


def _render(
    pointer: str, render_pointer: Callable[[str], HttpResponse | None] | None
) -> HttpResponse | None:
    """The resource at ``pointer`` rendered now, or None when it cannot stand in for the first
    body: no renderer (a form view), a URL this site does not serve (``render_pointer`` says
    None, or the resolver raises), a resource gone (its view raises, or answers other than
    2xx: a DRF detail view's 404 body), or a stream (never read into memory)."""
    if render_pointer is None:
        return None
    try:
        fresh = render_pointer(pointer)
    except Exception as exc:  # the view of another endpoint: any failure is "gone"
        logger.warning("a replay's resource could not be rendered (%s)", type(exc).__name__)
        return None
    if fresh is None:
        return None
    if fresh.streaming or not 200 <= fresh.status_code < 300:
        fresh.close()
        return None
    return fresh


def _body_omitted(stored: StoredResponse) -> tuple[tuple[str, str], ...]:
    """A pointer's headers as the marker of an omitted body (``idempotency/core/replies.py``);
    a pointer stored without the marker (before it was kept) gets ``unknown`` as the size."""
    headers = _without(stored.headers, "Content-Type")
    if any(name.lower() == OMITTED_HEADER.lower() for name, _ in headers):
        return headers
    return (*headers, (OMITTED_HEADER, UNKNOWN_SIZE))


def _without(headers: tuple[tuple[str, str], ...], name: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in headers if k.lower() != name.lower())


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
