"""What a finished response becomes when it is kept for replays, under one byte cap.

Every stored reply (the Redis entry, the database record and the in-process cache all hold
the :class:`StoredResponse` built here) serialises to at most ``MAX_STORED_REPLY_BYTES``
(64 KiB by default), status and headers included. A response that would be larger:

- names the resource it created in ``Location``: kept as a *pointer*; a replay renders that
  resource afresh (its current state) with the original status and headers;
- is a refusal (status 4xx) with no ``Location``: *not kept at all* (:func:`to_stored` returns
  None). The engine then rolls the request's transaction back and releases the key, as it does
  for a 5xx, so the refusal wrote nothing and a retry with the same key runs the request again:
  the same input gets the same refusal, byte for byte;
- is a success with no ``Location``: kept as a *marker*, the status and headers (less
  ``Content-Type``) with an empty body and ``Idempotent-Body-Omitted: <size in bytes>``. The
  operation happened once and a retry must not run it again, so the replay says so without the
  body.

Redaction (``redact``, :mod:`idempotency.core.redaction`) runs first, so the cap counts the
redacted body. A body redaction applies to but cannot search (not JSON) is kept in the same
pointer / marker / not-at-all form as an oversized one.

A streamed body (``StreamingHttpResponse``, ``FileResponse``) is never read here: it may be
larger than memory, and it is the first caller's, produced as it is sent, after the engine's
transaction committed. It is kept in that same form too, its size the ``Content-Length`` the
response declares (a ``FileResponse`` of a file does), else ``unknown``.

A pointer keeps the marker header as well: a replay drops it when it renders the resource, and
answers the marker when the resource cannot be rendered (``idempotency/core/responses.py``).
"""

from __future__ import annotations

from django.http import HttpResponseBase

from idempotency.core.conf import engine_setting
from idempotency.core.outcomes import StoredResponse
from idempotency.core.redaction import REDACTED_HEADER, NotJson, redact_body

OMITTED_HEADER = "Idempotent-Body-Omitted"
# The marker's value when the size of the body is not known (a stream of undeclared length)
UNKNOWN_SIZE = "unknown"


class ReplyTooLarge(Exception):
    """Even the pointer or marker form is over the cap (headers larger than the cap): the
    result cannot be kept, so the request must not take effect."""


def to_stored(response: HttpResponseBase, *, redact: tuple[str, ...] = ()) -> StoredResponse | None:
    """The reply a retry will get (status, allow-listed headers, never ``Set-Cookie``, body),
    with the values at the ``redact`` paths blanked (:mod:`idempotency.core.redaction`), cut
    to the cap as the module docstring says; None for a refusal that cannot be kept."""
    cap = engine_setting("MAX_STORED_REPLY_BYTES")
    allowed = {h.lower() for h in engine_setting("REPLAY_HEADERS")}
    headers = tuple((k, v) for k, v in response.items() if k.lower() in allowed)
    if response.streaming:
        return _without_body(response, headers, cap)
    body = response.content
    if redact and body:
        try:
            body, blanked = redact_body(body, response.get("Content-Type", ""), redact)
        except NotJson:
            # the values could be anywhere in it: keep no body at all
            return _without_body(response, headers, cap)
        if blanked:
            headers = (*headers, (REDACTED_HEADER, ", ".join(blanked)))
    whole = StoredResponse(status=response.status_code, headers=headers, body=body)
    if whole.size <= cap:
        return whole
    return _without_body(response, headers, cap)


def _without_body(
    response: HttpResponseBase, headers: tuple[tuple[str, str], ...], cap: int
) -> StoredResponse | None:
    """A pointer to the resource, a marker of the omitted body, or None for a refusal."""
    location = response.get("Location", "")
    marker = (OMITTED_HEADER, omitted_size(response))
    if location:
        kept = StoredResponse(
            status=response.status_code, headers=(*headers, marker), pointer=location
        )
    elif response.status_code >= 400:
        return None
    else:
        kept = StoredResponse(
            status=response.status_code,
            headers=(*((k, v) for k, v in headers if k.lower() != "content-type"), marker),
        )
    if kept.size > cap:
        raise ReplyTooLarge(f"{kept.size} bytes of status and headers; the cap is {cap}")
    return kept


def omitted_size(response: HttpResponseBase) -> str:
    """The value of the marker: the body's size in bytes, read without consuming a stream."""
    if response.streaming:
        return response.get("Content-Length", UNKNOWN_SIZE)
    return str(len(response.content))
