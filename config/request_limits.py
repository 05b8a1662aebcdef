"""Refuse request bodies above ``settings.MAX_REQUEST_BYTES`` before anything reads them.

Why a middleware and not only ``DATA_UPLOAD_MAX_MEMORY_SIZE``: Django checks that setting when
something first touches ``request.body``, and by then DRF has authenticated the caller and the
idempotency engine may be about to fingerprint the payload. Here a too-large body is answered
413 ``REQUEST_TOO_LARGE`` from the headers alone, so a 10 MB upload costs one header parse:

- a declared ``Content-Length`` above the limit is refused without reading a byte of the body;
- a ``Transfer-Encoding: chunked`` body (no length announced) is read at most one byte past
  the limit. Django itself ignores chunked bodies (it trusts ``Content-Length`` only), so a
  chunked body within the limit is handed on as if it had been sent with its length. One the
  server cannot decode (a chunk size that is not a number, a chunk without its terminator, the
  connection ending mid-body) is answered 400 ``BAD_REQUEST``: gunicorn raises its parse error
  from the read, which was a 500 for anyone, with a traceback in the log. A server that hands
  the chunks on undecoded (Django's development server, the demo's) gets 411
  ``LENGTH_REQUIRED`` instead, before anything reads the body.

A browser page's query string holding a NUL character is answered 400: PostgreSQL refuses NUL
in text, so a list filter of the admin given one (``?status__exact=%00``) failed in the
database, a 500. No page of ours has a use for one. (The API validates its own parameters.)
Likewise an admin action's selected rows (``_selected_action``) that are not keys at all: every
model the admin lists has an integer or UUID key (a test holds this), and Django's admin let a
value of another shape fail in the key's conversion, a 500.

A query string of more parameters than Django reads (``DATA_UPLOAD_MAX_NUMBER_FIELDS``, 1,000)
is answered 400 here, on every path, before anything reads the query. Django refuses it when
the query is first read (``TooManyFieldsSent``), which is a 400 with ``DEBUG`` off; with it on
(the demo) its technical error page reads the query again to show it, which raised again from
inside the error handling, and the HTTP server answered 500 with a page of its own.

API paths (``/api/``) get the shared problem+json shape (``config/api_errors.py``); other paths
(dashboard forms, the admin) a short plain-text answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from io import BytesIO

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse
from gunicorn.http.errors import ParseException

from config.api_errors import code_for_status, problem_http_response

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
_READ_CHUNK = 64 * 1024


def max_request_bytes() -> int:
    return int(getattr(settings, "MAX_REQUEST_BYTES", DEFAULT_MAX_REQUEST_BYTES))


def too_large_response(request: HttpRequest, limit: int) -> HttpResponse:
    detail = f"Request body larger than {limit} bytes"
    if request.path.startswith("/api/"):
        return problem_http_response(413, REQUEST_TOO_LARGE, detail, limit=limit)
    return HttpResponse(detail, status=413, content_type="text/plain; charset=utf-8")


class RequestSizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _too_many_query_parameters(request):
            return _bad_request_response(
                request, f"More than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query parameters"
            )
        if not request.path.startswith("/api/"):
            refused = _unusable_page_input(request)
            if refused:
                return HttpResponse(refused, status=400, content_type="text/plain; charset=utf-8")
        limit = max_request_bytes()
        declared = _declared_length(request)
        if declared is not None:
            if declared > limit:
                return too_large_response(request, limit)
        elif _is_chunked(request):
            if _server_left_chunks_undecoded(request):
                return _length_required_response(request)
            try:
                fits = _buffer_chunked_body(request, limit)
            except (ParseException, OSError):  # gunicorn's NoMoreData is an OSError
                return _malformed_body_response(request)
            if not fits:
                return too_large_response(request, limit)
        return self.get_response(request)


def _too_many_query_parameters(request: HttpRequest) -> bool:
    """Whether the query string holds more parameters than Django reads (module docstring).
    A request without a query string builds no query dict for it."""
    if not request.META.get("QUERY_STRING"):
        return False
    try:
        request.GET  # noqa: B018  (read once here: cached for the views)
    except TooManyFieldsSent:
        return True
    return False


def _unusable_page_input(request: HttpRequest) -> str | None:
    """Why a browser page's request carries input no page of ours can use, if it does."""
    if _query_holds_nul(request):
        return "A query parameter holds a NUL character"
    if (
        request.method == "POST"
        and request.path.startswith("/admin/")
        and not all(_ROW_KEY.match(key) for key in request.POST.getlist("_selected_action"))
    ):
        return "The selected rows are not rows of this list"
    return None


# an integer or UUID primary key, as the admin writes it in a list's checkboxes
_ROW_KEY = re.compile(r"\A(?:[0-9]{1,20}|[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12})\Z")


def _query_holds_nul(request: HttpRequest) -> bool:
    return any(
        "\x00" in name or any("\x00" in value for value in values)
        for name, values in request.GET.lists()
    )


def _malformed_body_response(request: HttpRequest) -> HttpResponse:
    return _bad_request_response(request, "The chunked request body is not well-formed")


def _bad_request_response(request: HttpRequest, detail: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return problem_http_response(400, "BAD_REQUEST", detail)
    return HttpResponse(detail, status=400, content_type="text/plain; charset=utf-8")


def _declared_length(request: HttpRequest) -> int | None:
    """The announced body length; None when there is none (or it is not a number, which
    Django reads as an empty body and the WSGI server has usually refused already)."""
    raw = request.META.get("CONTENT_LENGTH")
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _is_chunked(request: HttpRequest) -> bool:
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def _server_left_chunks_undecoded(request: HttpRequest) -> bool:
    """Whether the WSGI server hands the application a chunked body it has not decoded.

    gunicorn decodes chunks and says so (``wsgi.input_terminated``, the flag servers set when
    the input ends at the body's end); Django's development server does not, and reads a body by
    its ``Content-Length`` alone, so the view would see no body at all, and the engine keep
    that view's 400 under the client's key. An ASGI server decodes before Django sees the body
    (there is no ``wsgi.input``)."""
    return "wsgi.input" in request.META and not request.META.get("wsgi.input_terminated")


def _length_required_response(request: HttpRequest) -> HttpResponse:
    detail = "This server reads a request body by its Content-Length: send one, not chunks"
    if request.path.startswith("/api/"):
        return problem_http_response(411, code_for_status(411)[0], detail)
    return HttpResponse(detail, status=411, content_type="text/plain; charset=utf-8")


def _buffer_chunked_body(request: HttpRequest, limit: int) -> bool:
    """Read a chunked body up to ``limit`` + 1 bytes. False: it is too large. True: it fits,
    and the request now reads it like a body sent with ``Content-Length``."""
    stream = request.META.get("wsgi.input")
    if stream is None:
        return True
    received = bytearray()
    while len(received) <= limit:
        chunk = stream.read(min(_READ_CHUNK, limit + 1 - len(received)))
        if not chunk:
            break
        received += chunk
    if len(received) > limit:
        return False
    request.META["CONTENT_LENGTH"] = str(len(received))
    request._stream = LimitedStream(BytesIO(bytes(received)), len(received))  # type: ignore[attr-defined]
    return True
