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

The schema is the same for every request (served to anyone, no credential read, nothing
filtered by permission), yet drf-spectacular generated it again for each one and wrote it out
again: about 40 ms of a worker's CPU per request, for anyone, where a menu read costs 2. Each
process now generates it once per language and writes it once per media type asked for
(``KeptSchemaGenerator``, ``kept_rendering``); a changed setting (a test's
``override_settings``) drops what was kept. ``manage.py spectacular`` keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import translation
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

# What a process keeps, bounded whatever callers ask for: schemas of this many languages
# (``?lang=`` takes any of Django's hundred), and per schema this many renderings (YAML and
# JSON, with and without ``indent``), about 80 to 150 KB each. Past either, a request's
# schema is generated or written out as drf-spectacular does, and not kept.
MAX_LANGUAGES = 4
MAX_RENDERINGS = 8


class KeptSchema(dict):
    """A generated schema, with what it was written out as, per renderer and media type."""

    def __init__(self, schema: dict[str, Any]) -> None:
        super().__init__(schema)
        self.renderings: dict[tuple[type, str], bytes] = {}

    def rendered(
        self, renderer: BaseRenderer, media_type: str, render: Callable[[], bytes]
    ) -> bytes:
        key = (type(renderer), media_type)
        content = self.renderings.get(key)
        if content is None:
            content = render()
            if len(self.renderings) < MAX_RENDERINGS:
                self.renderings[key] = content
        return content


_KEPT: dict[tuple[str | None, bool, str | None], KeptSchema] = {}


@receiver(setting_changed)
def _forget_kept_schemas(**kwargs: Any) -> None:
    _KEPT.clear()


class KeptSchemaGenerator(SchemaGenerator):
    """drf-spectacular's generator, generating once per process and language."""

    def get_schema(self, request: Any = None, public: bool = False) -> KeptSchema:
        key = (translation.get_language(), public, self.api_version)
        kept = _KEPT.get(key)
        if kept is None:
            kept = KeptSchema(super().get_schema(request, public))
            if len(_KEPT) < MAX_LANGUAGES:
                kept = _KEPT.setdefault(key, kept)
        return kept


def kept_rendering(renderer_class: type[BaseRenderer]) -> type[BaseRenderer]:
    """``renderer_class`` writing a kept schema once per media type."""

    class KeptRendering(renderer_class):  # type: ignore[valid-type,misc]
        def render(
            self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
        ) -> bytes:
            if not isinstance(data, KeptSchema):
                return super().render(data, accepted_media_type, renderer_context)

            def render() -> bytes:  # YAML's dumper writes a dict, not a subclass of one
                return super(KeptRendering, self).render(
                    dict(data), accepted_media_type, renderer_context
                )

            return data.rendered(self, accepted_media_type or "", render)

    KeptRendering.__name__ = KeptRendering.__qualname__ = f"Kept{renderer_class.__name__}"
    return KeptRendering


class SchemaView(SpectacularAPIView):
    generator_class = KeptSchemaGenerator
    renderer_classes = [kept_rendering(r) for r in SpectacularAPIView.renderer_classes]

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
