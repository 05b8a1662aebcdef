"""DRF's content negotiation, its answer remembered per ``Accept`` header and renderer set.

Before every API view runs, DRF picks the renderer of the answer from the ``Accept`` header
(``DefaultContentNegotiation.select_renderer``): it builds the request's header map, parses
each of the header's media types and each renderer's own media type, and orders them by
precedence. It does this afresh for every request, though clients send the same few headers
(``application/json``, ``*/*``, none at all) again and again. Measured in the running request
(one process, the thread's CPU around the call): 41 µs of an order replay's 676, 45 of a bare
create's 963 (``docs/benchmarks.md``, the causes table: 7 and 8 µs with the decisions kept).

:class:`RememberingContentNegotiation` keeps DRF's decision for an ``Accept`` header and the
media types of the view's renderers, in order (all the decision reads of them) and
hands it back for the next request that carries the same. What is not kept: a request that
names its format (a ``.json`` suffix or ``?format=``, which filters the renderers first), a
refusal (406: raised afresh every time), and a header longer than
:data:`MAX_REMEMBERED_HEADER`. The table holds at most :data:`MAX_REMEMBERED` decisions and is
emptied when full, so a client sending ever new headers costs memory once and then only
misses.

A format the view has no renderer for (``?format=xml``) is refused as an ``Accept`` header it
cannot satisfy, 406 ``NOT_ACCEPTABLE``; DRF answers 404, as if the resource did not exist.

A media range the header gives ``q=0`` is one the client does not accept (RFC 9110 12.4.2):
renderers it covers are left out, and the range is not offered to DRF, which ignores quality
values and answered JSON to ``Accept: application/json;q=0``. Nothing left: 406.
"""

from __future__ import annotations

import re

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.utils.mediatypes import _MediaType, media_type_matches

MAX_REMEMBERED = 256
MAX_REMEMBERED_HEADER = 512

# a quality value of zero (RFC 9110: "0" with up to three zero decimals), as a media range's
# parameter
_REFUSED = re.compile(r";\s*q\s*=\s*0(?:\.0{0,3})?\s*(?:;|,|$)", re.IGNORECASE)

# (Accept header or None when absent, the renderers' media types) -> (renderer index, media type)
_decisions: dict[tuple[str | None, tuple[str, ...]], tuple[int, str]] = {}


class RememberingContentNegotiation(DefaultContentNegotiation):
    """:class:`DefaultContentNegotiation` with its decisions remembered (module docstring)."""

    def select_renderer(
        self,
        request: Request,
        renderers: list[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        accept = request.META.get("HTTP_ACCEPT")
        if (
            format_suffix
            or (accept is not None and len(accept) > MAX_REMEMBERED_HEADER)
            or (
                # no query string, no ?format=: the query's dict is not built for nothing
                request.META.get("QUERY_STRING")
                and request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
            )
        ):
            return self._decide(request, renderers, format_suffix, accept)
        key = (accept, tuple(renderer.media_type for renderer in renderers))
        decided = _decisions.get(key)
        if decided is not None:
            index, media_type = decided
            return renderers[index], media_type
        renderer, media_type = self._decide(request, renderers, format_suffix, accept)
        if len(_decisions) >= MAX_REMEMBERED:
            _decisions.clear()
        _decisions[key] = (renderers.index(renderer), media_type)  # renderers compare by identity
        return renderer, media_type

    def _decide(
        self,
        request: Request,
        renderers: list[BaseRenderer],
        format_suffix: str | None,
        accept: str | None,
    ) -> tuple[BaseRenderer, str]:
        """DRF's decision, over the renderers the header does not refuse (``q=0``)."""
        if accept and _REFUSED.search(accept):
            ranges = [token.strip() for token in accept.split(",")]
            renderers = [r for r in renderers if not refuses(ranges, r.media_type)]
            if not renderers:
                raise NotAcceptable("The Accept header refuses every format this answer has")
        return super().select_renderer(request, renderers, format_suffix)

    def get_accept_list(self, request: Request) -> list[str]:
        """DRF's list of the header's media ranges, without those it gives ``q=0``."""
        return [token for token in super().get_accept_list(request) if not _REFUSED.search(token)]

    def filter_renderers(self, renderers: list[BaseRenderer], format: str) -> list[BaseRenderer]:
        named = [renderer for renderer in renderers if renderer.format == format]
        if not named:
            raise NotAcceptable("No answer in the format the request names (?format=)")
        return named


def refuses(ranges: list[str], media_type: str) -> bool:
    """Whether the most specific of the media ``ranges`` that covers ``media_type`` gives it a
    quality of zero (``*/*;q=0, application/json`` still accepts JSON)."""
    covering = [r for r in ranges if media_type_matches(media_type, r)]
    if not covering:
        return False
    most_specific = max(covering, key=lambda r: _MediaType(r).precedence)
    return bool(_REFUSED.search(most_specific))
