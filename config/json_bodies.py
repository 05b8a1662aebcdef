"""415 ``UNSUPPORTED_MEDIA_TYPE`` for an API request whose body is not JSON, whatever the view.

The API's one parser is JSON (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``), but a parser runs
only when a view reads the body: sign-out, refresh and a diner's revocation read none, so a form
sent to them was answered as if it were JSON (200, 204), where placing, paying or cancelling
refused the same form 415. "Request bodies are JSON only" held for some operations. It is
checked here, once the URL is resolved and before the view, its credentials or the idempotency
engine run, for every operation alike and with DRF's own wording, so a client meets one rule
and a refused request's ``Idempotency-Key`` stays free. A path that does not exist (404), or a
method its view does not serve (405), is left to answer as such. A request without a body
(``Content-Length: 0``, as the client libraries send to pay, cancel, refresh and sign out, or a
chunked body of no bytes) is not looked at, nor are reads, whose bodies nothing reads.

A body sent in a content coding (``Content-Encoding: gzip``, ``br``…) is refused the same way:
nothing here decodes one, so a gzip body met the JSON parser as bytes it could not read (400
``INVALID_JSON``), and a plain body labelled with a coding was read as if it carried none and
ran. The answer names ``identity`` in ``Accept-Encoding``, the one coding taken (RFC 9110
12.5.3). So is one in a transfer coding besides ``chunked`` (``Transfer-Encoding: gzip,
chunked``): gunicorn takes it and hands the body on as it came, still gzip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from config.api_error_pages import is_api_path
from config.api_errors import clip, problem_http_response
from config.body_charset import READS, has_body, served

JSON = "application/json"
IDENTITY = "identity"
CHUNKED = "chunked"


class JsonBodiesOnlyMiddleware:
    """415 for a body on an API write whose media type is not ``application/json``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if (
            not is_api_path(request)
            or request.method in READS
            or not served(view_func, request.method or "")
            or not has_body(request)
        ):
            return None
        coding = request.META.get("HTTP_CONTENT_ENCODING", "")
        if _undecoded(coding, taken=("", IDENTITY)):
            refused = problem_http_response(
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                f'Unsupported content coding "{clip(coding)}" in request. Send the body '
                f"uncompressed (no Content-Encoding, or {IDENTITY}).",
            )
            refused["Accept-Encoding"] = IDENTITY
            return refused
        transfer = request.META.get("HTTP_TRANSFER_ENCODING", "")
        if _undecoded(transfer, taken=("", IDENTITY, CHUNKED)):
            return problem_http_response(
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                f'Unsupported transfer coding "{clip(transfer)}" in request. Send the body '
                f"uncompressed (Transfer-Encoding: {CHUNKED} alone, or a Content-Length).",
            )
        if request.content_type.lower() == JSON:
            return None
        declared = clip(request.META.get("CONTENT_TYPE", ""))
        return problem_http_response(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f'Unsupported media type "{declared}" in request. Request bodies are JSON only '
            f"(Content-Type: {JSON}).",
        )


def _undecoded(codings: str, *, taken: tuple[str, ...]) -> bool:
    """Whether the comma-separated ``codings`` name one besides those ``taken``."""
    return any(coding.strip().lower() not in taken for coding in codings.split(","))
