"""``@idempotent`` and ``@idempotent_form`` put on what they cannot protect say so, naming the
view, when the module is imported where that can be told, else on the first request; never
a 500 from deep inside the engine."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.utils.decorators import method_decorator
from rest_framework import exceptions, generics, serializers
from rest_framework.decorators import api_view
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency import idempotent, idempotent_form
from idempotency.tests.conftest import caller
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.scope import resolver_answer


def test_an_async_form_view_is_refused_when_decorated():
    """(red: a 500 on the first POST, ``'coroutine' object has no attribute 'status_code'``)"""

    async def add_note(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    with pytest.raises(ImproperlyConfigured, match=r"add_note, an async view: .* sync views only"):
        idempotent_form(fields=("text",))(add_note)


def test_an_async_drf_handler_is_refused_when_decorated():
    """(red: DRF's assertion on the first request, about a coroutine returned as a response)"""
    with pytest.raises(ImproperlyConfigured, match=r"CreateNote.post, an async view"):

        class CreateNote:
            @idempotent(required=True)
            async def post(self, request: HttpRequest) -> Response:
                return Response(status=201)


def test_a_plain_function_view_under_the_drf_decorator_is_refused_when_decorated():
    """(red: a 500 on the first request, ``missing 1 required positional argument``)"""

    def create_note(request: HttpRequest) -> Response:
        return Response(status=201)

    with pytest.raises(ImproperlyConfigured, match=r"not .*create_note, a plain function view"):
        idempotent(required=True)(create_note)


def test_a_view_class_under_either_decorator_is_refused_when_decorated():
    """(red: ``@idempotent`` put a function in the class's place, and the URLconf failed with
    ``'function' object has no attribute 'as_view'``, naming neither the decorator nor the
    handler; ``@idempotent_form`` did the same to a class-based view)"""

    class CreateNote(APIView):
        def post(self, request: HttpRequest) -> Response:
            return Response(status=201)

    with pytest.raises(ImproperlyConfigured, match=r"not the class .*CreateNote: decorate"):
        idempotent(required=True)(CreateNote)
    with pytest.raises(ImproperlyConfigured, match=r"class .*CreateNote: .*method_decorator"):
        idempotent_form(fields=("text",))(CreateNote)


def test_the_drf_decorator_through_method_decorator_is_refused_when_decorated():
    """``@method_decorator(idempotent(...), name="post")`` on an APIView (as the README has a
    class-based form view take ``idempotent_form``) defined without a word and failed at the
    first request, a 500 saying the method was "a plain function view". Red: no error here."""
    with pytest.raises(ImproperlyConfigured, match=r"directly on .* not through method_decorator"):

        @method_decorator(idempotent(required=True), name="post")
        class CreateNote(APIView):
            def post(self, request: HttpRequest) -> Response:
                return Response(status=201)


def test_a_plain_function_view_the_decorator_cannot_tell_is_refused_when_called():
    def create_note(req: HttpRequest) -> Response:  # its request not named "request"
        return Response(status=201)

    view = idempotent(required=True)(create_note)
    with pytest.raises(ImproperlyConfigured, match="a plain function view"):
        view(RequestFactory().post("/notes/"))


def test_a_method_not_given_the_request_is_refused_when_called():
    """(red: a 500 from inside the engine, ``'TextSerializer' object has no attribute
    'META'``, naming neither the decorator nor the method)"""

    class TextSerializer(serializers.Serializer):
        text = serializers.CharField()

    class CreateNote(generics.CreateAPIView):
        serializer_class = TextSerializer
        authentication_classes: list = []
        permission_classes: list = []

        @idempotent(required=True)
        def perform_create(self, serializer: TextSerializer) -> None:
            raise AssertionError("never reached")

    request = RequestFactory().post("/notes/", {"text": "hi"}, content_type="application/json")
    with pytest.raises(
        ImproperlyConfigured, match=r"not .*CreateNote.perform_create, called with TextSerializer"
    ):
        CreateNote.as_view()(request)


def test_a_drf_function_view_under_either_decorator_is_named_as_one():
    """A DRF ``@api_view`` function: ``@idempotent`` beneath it is refused when decorated,
    naming ``@api_view``; ``@idempotent_form`` beneath it is handed DRF's ``Request`` and
    said it was "a method of a class-based view", to be decorated with ``method_decorator``,
    which fails the same way (red: that message)."""

    def create_note(request: HttpRequest) -> Response:
        return Response(status=201)

    drf_function = r"create_note, a plain function view \(or a DRF @api_view function\)"
    with pytest.raises(ImproperlyConfigured, match=drf_function):
        api_view(["POST"])(idempotent(required=True)(create_note))
    view = api_view(["POST"])(idempotent_form(fields=("text",))(create_note))
    with pytest.raises(
        ImproperlyConfigured,
        match=r"not .*create_note, a DRF view \(an @api_view function or an APIView\): make it",
    ):
        view(RequestFactory().post("/notes/", {"text": "hi"}))


def test_the_form_decorator_over_a_drf_view_is_refused_when_decorated():
    """Over ``@api_view`` (or an ``APIView``'s ``as_view()``) the form decorator ran before DRF
    authenticated the request: a caller with a token or an API key was no one to Django, so
    the request had no scope and ran unprotected, each duplicate executed (red: decorated
    without a word)."""

    @api_view(["POST"])
    def create_note(request: HttpRequest) -> Response:
        return Response(status=201)

    class CreateNote(APIView):
        def post(self, request: HttpRequest) -> Response:
            return Response(status=201)

    for view in (create_note, CreateNote.as_view()):
        with pytest.raises(
            ImproperlyConfigured, match=r"a DRF view \(an @api_view function or an APIView\)"
        ):
            idempotent_form(fields=("text",))(view)


def test_a_class_based_views_method_under_the_form_decorator_is_refused_when_decorated():
    """(red: a 500 on the first POST, ``'AddNote' object has no attribute 'method'``)"""
    with pytest.raises(ImproperlyConfigured, match=r"AddNote.post, a method .*method_decorator"):

        class AddNote:
            @idempotent_form(fields=("text",))
            def post(self, request: HttpRequest) -> HttpResponse:
                return HttpResponse()


def test_a_method_the_form_decorator_cannot_tell_is_refused_when_called():
    class AddNote:
        @idempotent_form(fields=("text",))
        def post(this, request: HttpRequest) -> HttpResponse:
            return HttpResponse()

    with pytest.raises(ImproperlyConfigured, match="method_decorator"):
        AddNote().post(RequestFactory().post("/notes/form/class/"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"fields": ("text")}, r"not the string 'text'", id="fields-without-comma"),
        pytest.param({"redact": ("phone")}, r"not the string 'phone'", id="redact-without-comma"),
        pytest.param({"ttl_seconds": -60}, r"ttl_seconds must be a positive", id="negative-ttl"),
        pytest.param({"ttl_seconds": 1.5}, r"ttl_seconds must be a positive", id="fractional-ttl"),
        pytest.param({"auto_key_window": -1}, r"auto_key_window must be", id="negative-window"),
        pytest.param({"ttl_seconds": 10**12}, r"up to 316224000", id="ttl-past-dates"),
        pytest.param({"in_flight": "queue"}, r'in_flight must be "reject" or "wait"', id="queue"),
        pytest.param({"wait_seconds": 0}, r"wait_seconds must be a positive", id="no-wait"),
        pytest.param(
            {"in_flight": "wait", "wait_seconds": float("inf")},
            r"wait_seconds must be a positive number of seconds up to 2147483, not inf",
            id="endless-wait",
        ),
        pytest.param({"wait_seconds": float("nan")}, r"wait_seconds must be", id="nan-wait"),
        pytest.param({"wait_seconds": 10_000_000}, r"up to 2147483", id="past-lock-timeout"),
    ],
)
def test_a_malformed_drf_option_is_refused_when_decorated(options, message):
    """(red: ``fields=("text")`` hashed the fields t, e, x, t, in no body, so a key reused with
    another text replayed the first answer instead of 422; ``ttl_seconds=-60`` stored results
    already expired, so database-only every retry ran the view again, and under Redis the
    answer was a 500 after the view's commit)"""
    with pytest.raises(ValueError, match=message):
        idempotent(required=True, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"fields": ("text")}, r"not the string 'text'", id="fields-without-comma"),
        pytest.param({"fields": ("text", 3)}, r"a list of field names", id="fields-not-names"),
        pytest.param({"auto_key_window": 0}, r"auto_key_window must be", id="no-window"),
    ],
)
def test_a_malformed_form_option_is_refused_when_decorated(options, message):
    with pytest.raises(ValueError, match=message):
        idempotent_form(**options)


@pytest.mark.django_db
def test_a_class_based_form_view_under_method_decorator_applies_a_resubmit_once(
    engine_mode, tenant
):
    """As the README says: ``@method_decorator(idempotent_form(...), name="post")``."""
    client = Client()
    assert client.get("/notes/form/class/").status_code == 200
    form = {"text": "hi", "idempotency_key": "form-class-1"}
    first = client.post("/notes/form/class/", form, **caller(tenant))
    again = client.post("/notes/form/class/", form, **caller(tenant))
    assert (first.status_code, again.status_code) == (302, 302)
    assert first["X-Idempotent-Result"] == "MISS" and again["X-Idempotent-Result"] == "HIT"
    assert again["Location"] == first["Location"]
    assert Note.objects.count() == 1


@pytest.mark.django_db
def test_a_generic_create_view_under_the_form_decorator_answers_its_template_response(
    engine_mode, tenant
):
    """Django's ``CreateView`` answers an invalid form with a ``TemplateResponse``, which
    Django renders after the view returned; the engine keeps the rendered page (a 200 is kept,
    as the README says), and a valid form still applies once (red: a 500
    ``ContentNotRenderedError``, the engine read the page's bytes before anyone rendered it)."""
    client = Client()
    invalid = {"text": "", "idempotency_key": "form-generic-1"}
    first = client.post("/notes/form/generic/", invalid, **caller(tenant))
    assert first.status_code == 200 and first["X-Idempotent-Result"] == "MISS"
    assert b"This field is required." in first.content
    again = client.post("/notes/form/generic/", invalid, **caller(tenant))
    assert again.status_code == 200 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    valid = {"text": "hi", "idempotency_key": "form-generic-2"}
    applied = [client.post("/notes/form/generic/", valid, **caller(tenant)) for _ in range(2)]
    assert [a.status_code for a in applied] == [302, 302]
    assert [a["X-Idempotent-Result"] for a in applied] == ["MISS", "HIT"]
    assert list(Note.objects.values_list("text", flat=True)) == ["hi"]


@pytest.mark.parametrize(
    ("answer", "shape"),
    [
        (("t-1", 42), "tuple(str, int)"),
        (("t-1",), "tuple(str)"),
        ("t-1", "str"),
        ((None, None), "tuple(NoneType, NoneType)"),
    ],
    ids=["int-principal", "one-part", "a-string", "nones"],
)
@pytest.mark.parametrize(
    "path", ["/notes/", "/notes/form/", "/api/idempotency-tokens/"], ids=["drf", "form", "tokens"]
)
@pytest.mark.django_db
def test_a_resolver_answer_that_is_no_pair_of_strings_is_named(settings, path, answer, shape):
    """(red: a 500 naming nothing: a principal given as ``request.user.pk`` was ``TypeError:
    argument of type 'int' is not iterable``, a one-part answer ``not enough values to
    unpack``)"""
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "SCOPE_RESOLVER": "idempotency.tests.testapp.scope.answering",
    }
    resolver_answer["value"] = answer
    message = (
        r'IDEMPOTENCY\["SCOPE_RESOLVER"\] must answer None or a \(tenant, principal\) pair of '
        rf"strings, not {re.escape(shape)}$"
    )
    with pytest.raises(ImproperlyConfigured, match=message):
        Client().post(path, {"text": "hello"}, HTTP_IDEMPOTENCY_KEY="k")
    assert not Note.objects.exists()


@pytest.mark.django_db
def test_a_resolver_answering_a_list_pair_is_taken_as_its_tuple(settings):
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "SCOPE_RESOLVER": "idempotency.tests.testapp.scope.answering",
    }
    resolver_answer["value"] = ["t-1", "alice"]
    first, again = (
        Client().post("/notes/", {"text": "hello"}, HTTP_IDEMPOTENCY_KEY="k") for _ in range(2)
    )
    assert first.status_code == again.status_code == 201
    assert again["X-Idempotent-Result"] == "HIT" and Note.objects.count() == 1


class _NoteText(serializers.ModelSerializer):
    class Meta:
        model = Note
        fields = ("id", "text")


class _NoteUpdate(generics.UpdateAPIView):
    """DRF's update view: its ``partial_update`` (a PATCH) calls ``update``, both decorated."""

    queryset = Note.objects.all()
    serializer_class = _NoteText
    authentication_classes: list = []
    permission_classes: list = []

    @idempotent()
    def update(self, request: HttpRequest, *args: object, **kwargs: object) -> Response:
        return super().update(request, *args, **kwargs)

    @idempotent()
    def partial_update(self, request: HttpRequest, *args: object, **kwargs: object) -> Response:
        return super().partial_update(request, *args, **kwargs)


@pytest.mark.django_db
def test_a_decorated_handler_that_calls_another_decorated_one_runs_once_under_one_key(
    engine_mode, tenant
):
    """A ``ModelViewSet``'s ``partial_update`` calls its ``update``: with both decorated, a PATCH
    applies once and its retry replays it (red: the inner handler claimed the outer's key with
    its own payload, ``partial`` among its arguments; under Redis every PATCH was answered and
    kept as 422 ``IDEMPOTENCY_KEY_REUSED``, database-only it was a 500 ``IntegrityError``)."""
    note = Note.objects.create(text="before")
    view = _NoteUpdate.as_view()

    def patch() -> Response:
        request = RequestFactory().patch(
            f"/notes/{note.pk}/",
            {"text": "after"},
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="patch-1",
            **caller(tenant),
        )
        return view(request, pk=note.pk)

    first, again = patch(), patch()
    assert (first.status_code, again.status_code) == (200, 200), first.content
    assert first["X-Idempotent-Result"] == "MISS" and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    note.refresh_from_db()
    assert note.text == "after"


class _BulkNotes(APIView):
    """A bulk create: its body is a JSON array of notes, each with its own ``text``."""

    authentication_classes: list = []
    permission_classes: list = []

    @idempotent(required=True, fields=("text",))
    def post(self, request: HttpRequest) -> Response:
        notes = [Note.objects.create(text=item["text"]) for item in request.data]
        return Response([note.pk for note in notes], status=201)


@pytest.mark.django_db
def test_a_key_reused_with_another_array_body_is_refused_not_replayed(engine_mode, tenant):
    """``fields`` names what in a JSON object defines the operation; a body that is an array
    has no such fields, and is the operation whole (red: the named fields, looked up in no
    object, were all None, so every array was "the same operation": the key reused with other
    notes replayed the first answer, 201, and those notes were never made)."""
    view = _BulkNotes.as_view()

    def bulk(texts: list[str]) -> Response:
        request = RequestFactory().post(
            "/notes/bulk/",
            [{"text": text} for text in texts],
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="bulk-1",
            **caller(tenant),
        )
        return view(request)

    first = bulk(["a", "b"])
    again = bulk(["a", "b"])
    other = bulk(["c", "d"])
    assert (first.status_code, again.status_code) == (201, 201), first.content
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert other.status_code == 422, other.content
    assert json.loads(other.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert sorted(Note.objects.values_list("text", flat=True)) == ["a", "b"]


class _RawBody(BaseParser):
    """The body as its bytes, as a webhook receiver reads it to check the sender's signature."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> bytes:
        return stream.read()


class _Webhook(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes = [_RawBody]

    @idempotent(required=True)
    def post(self, request: HttpRequest) -> Response:
        note = Note.objects.create(text=request.data.decode())
        return Response({"id": note.pk}, status=201)


@pytest.mark.django_db
def test_a_body_parsed_as_bytes_counts_whole_as_its_digest(engine_mode, tenant):
    """A parser that hands the view the raw bytes (a webhook's, whose signature is over them)
    gives a body that is no object: it counts whole, as its SHA-256 (red: every such request
    was refused 400 ``IDEMPOTENCY_PAYLOAD_INVALID``, "cannot canonicalise bytes")."""
    view = _Webhook.as_view()

    def deliver(event: str) -> Response:
        request = RequestFactory().post(
            "/hooks/",
            json.dumps({"id": event}),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="evt-1",
            **caller(tenant),
        )
        return view(request)

    first = deliver("evt_1")
    again = deliver("evt_1")
    other = deliver("evt_2")
    assert (first.status_code, again.status_code) == (201, 201), first.content
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert other.status_code == 422, other.content
    assert list(Note.objects.values_list("text", flat=True)) == ['{"id": "evt_1"}']


class _BusyUpstream(APIView):
    """A write that asks the client to come back later (429 and ``Retry-After``) while the
    service it calls is busy: ``busy`` holds how many more calls find it so."""

    authentication_classes: list = []
    permission_classes: list = []
    busy = 0

    @idempotent(required=True, fields=("text",))
    def post(self, request: HttpRequest) -> Response:
        if _BusyUpstream.busy:
            _BusyUpstream.busy -= 1
            raise exceptions.Throttled(wait=30)
        note = Note.objects.create(text=request.data["text"])
        return Response({"id": note.pk}, status=201)


@pytest.mark.django_db
def test_a_429_the_view_answers_is_not_kept_and_the_retry_runs(engine_mode, tenant):
    """A 429 says nothing was done, try again after ``Retry-After``: like a 5xx it is not kept
    and the key is released (red: it was kept as the key's answer, so every retry, however
    late, was replayed that 429, without its ``Retry-After``, and the note was never made)."""
    _BusyUpstream.busy = 1
    view = _BusyUpstream.as_view()

    def send() -> Response:
        request = RequestFactory().post(
            "/notes/busy/",
            {"text": "later"},
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="busy-1",
            **caller(tenant),
        )
        return view(request)

    busy = send()
    assert busy.status_code == 429 and busy["Retry-After"] == "30"
    retried = send()
    assert retried.status_code == 201, retried.content
    assert retried["X-Idempotent-Result"] == "MISS"
    again = send()
    assert again["X-Idempotent-Result"] == "HIT" and again.content == retried.content
    assert list(Note.objects.values_list("text", flat=True)) == ["later"]
