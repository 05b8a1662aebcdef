"""``GET /api/schema/`` is the same for every request, yet drf-spectacular generated and wrote
it out again for each one (about 40 ms of a worker's CPU, for anyone). Each process now
generates it once per language and writes it once per media type, answering the bytes and
headers drf-spectacular's own view answers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.test import Client, RequestFactory, override_settings
from django.utils import translation
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.views import SpectacularAPIView

from config.schema_view import _KEPT, MAX_LANGUAGES, MAX_RENDERINGS, _forget_kept_schemas

ASKED = [
    ({}, {}),
    ({"format": "json"}, {}),
    ({}, {"HTTP_ACCEPT": "application/vnd.oai.openapi+json; indent=2"}),
    ({"lang": "de"}, {}),
]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Counter[str]]:
    """The languages the schema was generated in, and the writings per renderer class."""
    _forget_kept_schemas()
    generated: list[str] = []
    written: Counter[str] = Counter()
    generate = SchemaGenerator.get_schema

    def counting_generate(self: Any, request: Any = None, public: bool = False) -> Any:
        generated.append(translation.get_language())
        return generate(self, request, public)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting_generate)
    writing = [0]  # a renderer's render calling its base class's is one writing
    for renderer in SpectacularAPIView.renderer_classes:
        write = renderer.render

        def counting_write(self: Any, *args: Any, _write: Any = write, **kwargs: Any) -> Any:
            written[type(self).__name__] += writing[0] == 0
            writing[0] += 1
            try:
                return _write(self, *args, **kwargs)
            finally:
                writing[0] -= 1

        monkeypatch.setattr(renderer, "render", counting_write)
    yield generated, written
    _forget_kept_schemas()


@pytest.mark.django_db
def test_the_schema_is_generated_once_per_language_and_written_once_per_media_type(counted):
    generated, written = counted
    caller = Client()

    answers = [caller.get("/api/schema/", query, **headers) for query, headers in ASKED * 3]

    assert generated == ["en-us", "de"]
    assert sum(written.values()) == len(ASKED)  # each asked form written once, then kept
    for first, again in zip(answers[: len(ASKED)], answers[len(ASKED) :] * 2, strict=False):
        assert again.status_code == first.status_code == 200
        assert again.content == first.content
        assert again["Content-Type"] == first["Content-Type"]
        assert again["Content-Disposition"] == first["Content-Disposition"]


@pytest.mark.django_db
def test_the_kept_schema_is_what_drf_spectacular_s_own_view_answers(counted):
    caller, factory = Client(), RequestFactory()
    for query, headers in ASKED:
        caller.get("/api/schema/", query, **headers)  # kept now
        kept = caller.get("/api/schema/", query, **headers)
        own = SpectacularAPIView.as_view()(factory.get("/api/schema/", query, **headers))
        own.render()
        assert (kept.content, kept["Content-Type"]) == (own.content, own["Content-Type"])


@pytest.mark.django_db
def test_a_changed_setting_drops_the_kept_schema(counted):
    generated, _ = counted
    Client().get("/api/schema/")
    with override_settings(SPECTACULAR_SETTINGS={"TITLE": "Another title"}):
        pass
    Client().get("/api/schema/")
    assert generated == ["en-us", "en-us"]


@pytest.mark.django_db
def test_what_a_process_keeps_is_bounded_whatever_callers_ask_for(counted):
    generated, written = counted
    caller = Client()
    languages = ["de", "fr", "es", "it", "nl", "pt", "sv"]  # more than are kept
    indents = [{"HTTP_ACCEPT": f"application/json; indent={n}"} for n in range(1, 12)]

    for _ in range(2):
        for headers in indents:  # the default language's schema, kept first
            caller.get("/api/schema/", **headers)
        for language in languages:
            caller.get("/api/schema/", {"lang": language})

    assert len(_KEPT) == MAX_LANGUAGES
    assert all(len(kept.renderings) <= MAX_RENDERINGS for kept in _KEPT.values())
    # the second time round, only what could not be kept was generated or written again
    languages_kept = MAX_LANGUAGES - 1  # beside the default language's
    not_kept = len(languages) - languages_kept
    assert len(generated) == 1 + len(languages) + not_kept
    assert sum(written.values()) == (
        len(indents) + len(languages) + (len(indents) - MAX_RENDERINGS) + not_kept
    )
