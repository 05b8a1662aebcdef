"""``GET /api/schema/``: drf-spectacular's schema view, without its ``?version=`` parameter, and
with ``?lang=`` read only when it names a language the site has.

The API is versioned by its path (``/api/v1/``), not by a query parameter; drf-spectacular
copied any ``?version=`` it was sent into the answer's ``Content-Disposition`` file name, so a
control character there was a 500 for anyone (gunicorn refused the header it could not write),
and a quote broke the name. The parameter is ignored: the schema is the same whatever it says.

drf-spectacular hands ``?lang=`` to ``translation.override()`` as it comes, and Django keeps
the catalogue of every language code it is asked for until the process ends: each new value
(``?lang=zz1``, ``zz2``, ...) held some 20 KB of the worker for good, for anyone, no credential
needed. A code is now taken as the site's variant of it (``DE`` and ``de-at`` are ``de``), one
of ``settings.LANGUAGES``; any other is the default language, as its answer already was.
"""

from __future__ import annotations

from typing import Any

from django.utils import translation
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    @extend_schema(**SCHEMA_KWARGS)  # as drf-spectacular's own: not an operation of the API
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """drf-spectacular's ``get`` (this view names no ``urlconf`` of its own), with the
        language looked up among the site's."""
        language = site_language(request.query_params.get("lang"))
        with patched_settings(self.custom_settings):
            if language is None:
                return self._get_schema_response(request)
            with translation.override(language):
                return self._get_schema_response(request)

    def _get_version_parameter(self, request: Request) -> None:
        return None


def site_language(code: str | None) -> str | None:
    """The language of ``settings.LANGUAGES`` that ``code`` names; None: none (or no code)."""
    if not code:
        return None
    try:
        return translation.get_supported_language_variant(code.lower())
    except LookupError:
        return None
