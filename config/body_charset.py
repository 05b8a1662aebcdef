"""Refuse a request body declared in a charset other than UTF-8 (or its subset, ASCII).

Every parser behind a view decodes a body with the charset its ``Content-Type`` names: the API's
JSON parser (its only one), Django's ``request.POST`` for the dashboard's and the admin's forms.
Python's codecs include some that fail with a bare ``UnicodeError`` (``punycode``,
``undefined``), which none of those parsers expects: ``charset=punycode`` on any form or JSON
body was a 500. JSON exchanged between systems must be UTF-8 (RFC 8259 §8.1), and browsers send
our forms, whose pages are UTF-8, as UTF-8; so rather than making each parser survive every
codec, a body in any other declared charset is refused here, before anything decodes it:
415 ``UNSUPPORTED_MEDIA_TYPE`` on an API path, a plain-text 415 on the dashboard's and the
admin's. A ``Content-Type`` without a charset is read as UTF-8, as before. Requests without a
body are not looked at, nor are reads (``GET``, ``HEAD``, ``OPTIONS``): no parser runs for
them, and a 415 to a read was an answer no read of the API schema declares. Nor is an API
request to no route, or with a method its view does not serve: it is answered 404 or 405, as
the same body declared UTF-8 is, not told to change a charset that would not help.

A form-urlencoded body is stricter: Django reads one only when its charset is ``utf-8`` by
that very name (any other, an alias of UTF-8 too, is its ``BadRequest``, which the CSRF check
then met again, reading the form once more: a 500 on any admin or dashboard form), so only that
name, or none, is accepted for it.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from config.api_error_pages import is_api_path
from config.api_errors import problem_http_response

# codec names (as codecs.lookup gives them) of the charsets a body may be declared in
ACCEPTED_CHARSETS = frozenset({"utf-8", "ascii"})
FORM = "application/x-www-form-urlencoded"
# methods whose bodies nothing reads: neither Django (request.POST) nor a view of the API
READS = frozenset({"GET", "HEAD", "OPTIONS"})


class BodyCharsetMiddleware:
    """415 for a body whose declared charset is not in :data:`ACCEPTED_CHARSETS`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        charset = request.content_params.get("charset")
        if charset is not None and request.method not in READS and has_body(request):
            readable = (
                charset.lower() == "utf-8"
                if request.content_type == FORM
                else is_accepted_charset(charset)
            )
            if not readable and not _unrouted(request):
                return _refused(request)
        return self.get_response(request)


def served(view_func: Callable[..., Any], method: str) -> bool:
    """Whether the class-based view has a handler for ``method`` (else its 405 answers)."""
    view_class = getattr(view_func, "view_class", None)
    return view_class is not None and callable(getattr(view_class, method.lower(), None))


def _unrouted(request: HttpRequest) -> bool:
    """Whether ``request`` is an API request that no view will serve (404 or 405)."""
    if not is_api_path(request):
        return False
    try:
        match = resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return True
    return not served(match.func, request.method or "")


def is_accepted_charset(charset: str) -> bool:
    """Whether ``charset`` names UTF-8 or ASCII, under any of their aliases (``utf8``,
    ``UTF-8``, ``us-ascii``…). An unknown name is not accepted."""
    try:
        return codecs.lookup(charset).name in ACCEPTED_CHARSETS
    except LookupError:
        return False


def has_body(request: HttpRequest) -> bool:
    """A length above zero, or a chunked body not read yet. Once the size guard has read a
    chunked body it sets the length it found, so one of no bytes (``0``, as an HTTP/2 front or
    a streaming client sends a POST without a body) is no body."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if length:
        return length != "0"
    return "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


def _refused(request: HttpRequest) -> HttpResponse:
    detail = "Send the body in UTF-8: no other charset is accepted"
    if request.path.startswith("/api/"):
        return problem_http_response(415, "UNSUPPORTED_MEDIA_TYPE", detail)
    return HttpResponse(detail, status=415, content_type="text/plain; charset=utf-8")
