"""DRF's content negotiation with its decisions remembered (config/negotiation.py): the same
renderer and media type as DRF's own for every header, renderer set and format (a format no
renderer writes refused as 406, where DRF answers 404); each decision made once; refusals,
named formats and long headers never kept; the table bounded."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.http import Http404
from django.test import RequestFactory
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer, TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from config import negotiation
from config.negotiation import MAX_REMEMBERED, MAX_REMEMBERED_HEADER
from config.negotiation import RememberingContentNegotiation as Remembering

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
HEADERS = {
    "absent": None,
    "empty": "",
    "any": "*/*",
    "json": "application/json",
    "json with a parameter": "application/json; indent=4",
    "html": "text/html",
    "a browser's": BROWSER,
    "application wildcard": "application/*",
    "json preferred by weight": "text/html;q=0.1, application/json",
    "xml only (refused)": "application/xml",
    "blank tokens": " , ,application/json",
    "over the bound": "application/json," + "x/y," * (MAX_REMEMBERED_HEADER // 4),
}
RENDERER_SETS = {
    "json, browsable": (JSONRenderer, BrowsableAPIRenderer),
    "browsable, json": (BrowsableAPIRenderer, JSONRenderer),
    "json": (JSONRenderer,),
    "html template, json": (TemplateHTMLRenderer, JSONRenderer),
}
FORMATS = {
    "none": (None, ""),
    "suffix json": ("json", ""),
    "suffix api": ("api", ""),
    "query api": (None, "format=api"),
    "query xml": (None, "format=xml"),
}


@pytest.fixture(autouse=True)
def empty_table():
    negotiation._decisions.clear()
    yield
    negotiation._decisions.clear()


def request_with(accept: str | None, query: str = "") -> Request:
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}
    return Request(
        RequestFactory().get(f"/api/v1/orders/?{query}" if query else "/api/v1/orders/", **extra)
    )


def decide(negotiator: Any, accept: str | None, renderer_classes: tuple, fmt: tuple) -> Any:
    """(index of the chosen renderer in a fresh list, media type), or the exception's type;
    the chosen renderer must be one of this call's instances."""
    renderers = [cls() for cls in renderer_classes]
    suffix, query = fmt
    try:
        renderer, media_type = negotiator.select_renderer(
            request_with(accept, query), renderers, suffix
        )
    except (NotAcceptable, Http404) as refused:
        return type(refused)
    [index] = [i for i, candidate in enumerate(renderers) if candidate is renderer]
    return index, media_type


CASES = [
    (accept, renderers, fmt)
    for accept in HEADERS.values()
    for renderers in RENDERER_SETS.values()
    for fmt in FORMATS.values()
]


def test_every_decision_is_drfs_own_the_first_time_and_every_time_after():
    # given DRF's decision for every header, renderer set and format
    drf = [decide(DefaultContentNegotiation(), *case) for case in CASES]
    assert NotAcceptable in drf and Http404 in drf  # refusals are among the cases
    # (a format no renderer writes is 406 here, where DRF says the resource does not exist)
    expected = [NotAcceptable if decided is Http404 else decided for decided in drf]
    # when the remembering negotiator decides each of them three times, in one table
    rounds = [[decide(Remembering(), *case) for case in CASES] for _ in range(3)]
    # then every round answers exactly as DRF did, with this call's own renderer instance
    for answered in rounds:
        assert answered == expected


@pytest.fixture
def drf_decisions(monkeypatch) -> list[str | None]:
    """The headers DRF's own negotiation was asked to decide."""
    asked: list[str | None] = []
    original = DefaultContentNegotiation.select_renderer

    def counted(self, request, renderers, format_suffix=None):
        asked.append(request.META.get("HTTP_ACCEPT"))
        return original(self, request, renderers, format_suffix)

    monkeypatch.setattr(DefaultContentNegotiation, "select_renderer", counted)
    return asked


DEFAULT = RENDERER_SETS["json, browsable"]
NO_FORMAT = FORMATS["none"]


@pytest.mark.parametrize(
    "accept", [None, "application/json", BROWSER], ids=["absent", "json", "browser"]
)
def test_a_header_is_decided_once_per_renderer_set(drf_decisions, accept):
    for _ in range(5):
        decide(Remembering(), accept, DEFAULT, NO_FORMAT)
    decide(Remembering(), accept, RENDERER_SETS["browsable, json"], NO_FORMAT)
    assert drf_decisions == [accept, accept]


@pytest.mark.parametrize(
    "accept, fmt",
    [
        ("application/xml", NO_FORMAT),
        ("application/json", FORMATS["suffix json"]),
        ("application/json", FORMATS["query api"]),
        (HEADERS["over the bound"], NO_FORMAT),
    ],
    ids=["refused", "format suffix", "format in the query", "header over the bound"],
)
def test_refusals_named_formats_and_long_headers_are_decided_every_time(drf_decisions, accept, fmt):
    for _ in range(3):
        decide(Remembering(), accept, DEFAULT, fmt)
    assert drf_decisions == [accept] * 3
    assert negotiation._decisions == {}


class VendorJSONRenderer(JSONRenderer):
    """A renderer whose instances are told their media type (as a view may configure one)."""

    def __init__(self, media_type: str = "application/json") -> None:
        self.media_type = media_type


def test_renderers_of_one_class_with_other_media_types_get_their_own_decision():
    vendor = "application/vnd.restaurant+json"
    for _ in range(2):
        answered = Remembering().select_renderer(
            request_with(vendor), [VendorJSONRenderer(vendor)], None
        )
        assert answered[1] == vendor
        with pytest.raises(NotAcceptable):
            Remembering().select_renderer(request_with(vendor), [VendorJSONRenderer()], None)


def test_the_table_is_bounded_and_keeps_deciding_correctly_past_the_bound():
    headers = [f"application/json; v={i}" for i in range(MAX_REMEMBERED * 2 + 7)]
    for header in headers:
        assert decide(Remembering(), header, DEFAULT, NO_FORMAT) == (0, header)
        assert len(negotiation._decisions) <= MAX_REMEMBERED
    assert decide(Remembering(), BROWSER, DEFAULT, NO_FORMAT) == (1, "text/html")


def test_threads_deciding_at_once_each_get_the_answer_for_their_own_header():
    headers = {
        f"application/json; client={i}": (0, f"application/json; client={i}") for i in range(8)
    }
    headers[BROWSER] = (1, "text/html")
    start = threading.Barrier(len(headers))
    wrong: list[Any] = []

    def decide_many(header: str, expected: Any) -> None:
        start.wait()
        for _ in range(300):
            answer = decide(Remembering(), header, DEFAULT, NO_FORMAT)
            if answer != expected:
                wrong.append((header, answer))

    threads = [threading.Thread(target=decide_many, args=item) for item in headers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_the_api_negotiates_with_it():
    assert isinstance(APIView().get_content_negotiator(), Remembering)


@pytest.mark.django_db
def test_a_format_the_api_does_not_write_is_406_not_a_missing_resource(publishable_api, client):
    # DRF answered `?format=xml` (or `api`, its browsable pages, which this API does not serve)
    # with 404 "Not found", as if the menu did not exist.
    for fmt in ("xml", "api", "yaml"):
        refused = publishable_api.get("/api/v1/menu/", {"format": fmt})
        assert (refused.status_code, refused.json()["code"]) == (406, "NOT_ACCEPTABLE"), fmt
    assert publishable_api.get("/api/v1/menu/", {"format": "json"}).status_code == 200
    assert client.get("/api/schema/", {"format": "yaml"}).status_code == 200


@pytest.mark.django_db
def test_an_unacceptable_header_is_refused_by_the_api_every_time(client):
    for _ in range(2):
        refused = client.get("/api/v1/orders/", HTTP_ACCEPT="application/xml")
        assert refused.status_code == 406
        assert refused.json()["code"] == "NOT_ACCEPTABLE"
    answered = client.get("/api/v1/orders/", HTTP_ACCEPT="application/json")
    assert answered.status_code == 401  # past negotiation, refused by authentication
    assert answered["Content-Type"] == "application/problem+json"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("accept", "status"),
    [
        # a quality of zero refuses (red: 401, JSON answered as if acceptable)
        ("application/json;q=0", 406),
        ("application/json; q=0.000", 406),
        ("application/json;q=0, */*", 406),  # the most specific range decides
        ("*/*;q=0", 406),
        # and any other quality accepts
        ("application/json;q=0.5", 401),
        ("*/*;q=0, application/json", 401),
        ("text/html;q=0, application/json;q=0.001", 401),
    ],
)
def test_a_media_range_of_quality_zero_is_refused(client, accept, status):
    for _ in range(2):  # decided afresh, or remembered, alike
        answer = client.get("/api/v1/orders/", HTTP_ACCEPT=accept)
        assert answer.status_code == status, accept
        if status == 406:
            assert answer.json()["code"] == "NOT_ACCEPTABLE"
