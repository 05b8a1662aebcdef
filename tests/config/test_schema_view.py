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

from config.schema_view import _forget_kept_schemas

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
    for renderer in SpectacularAPIView.renderer_classes:
        write = renderer.render

        def counting_write(self: Any, *args: Any, _write: Any = write, **kwargs: Any) -> Any:
            written[type(self).__name__] += 1
            return _write(self, *args, **kwargs)

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
