"""The contract suite's views: one DRF create view and one plain Django form view, each
behind the engine's decorator.

Four switches let a test shape an execution: :data:`behaviour` ``delay_seconds`` holds every
execution (so duplicates overlap), ``hold`` (a list of :class:`threading.Event`) holds each
execution until the test sets its event — the first execution waits for the first event, the
next for the next, every later one for the last — so a test releases runs, in the order it
chooses, on events it observed instead of guessing a delay; a text listed in ``fail_once``
answers 500 the first time it is written (a 5xx must not be stored), one in ``raise_once``
is written, then the view raises, the first time; and a text listed in
``refuse_after_write`` is written, then refused with 409 inside the business transaction (the
commit callbacks it registered append to ``committed``); one in ``refuse`` is refused by the
automatic-key view before anything is written.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_POST
from django.views.generic import CreateView
from rest_framework.generics import RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import ModelSerializer
from rest_framework.views import APIView

from idempotency import business_atomic, idempotent, idempotent_form
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.scope import from_headers
from idempotency.web.throttle import TenantRateThrottle

behaviour: dict[str, Any] = {
    "delay_seconds": 0.0,
    "hold": None,
    "fail_once": set(),
    "raise_once": set(),
    "refuse_after_write": set(),
    "refuse": set(),
    "committed": [],
    "chunks_sent": 0,
}
HOLD_DEADLINE_SECONDS = 120.0  # a test that never releases its hold fails, it does not hang


def _write(request: HttpRequest, text: str) -> Note | None:
    time.sleep(behaviour["delay_seconds"])
    holds: list[threading.Event] | None = behaviour["hold"]
    if holds:
        hold = holds.pop(0) if len(holds) > 1 else holds[0]  # list.pop is atomic
        hold.wait(HOLD_DEADLINE_SECONDS)
    if text in behaviour["fail_once"]:
        behaviour["fail_once"].discard(text)
        return None
    tenant, principal = from_headers(request) or ("", "")
    # the note keeps the start of a long principal (tests of long scopes send 250 characters)
    note = Note.objects.create(tenant=tenant, principal=principal[:64], text=text)
    if text in behaviour["raise_once"]:
        behaviour["raise_once"].discard(text)
        raise RuntimeError(f"the view failed after writing {text!r}")
    return note


class NoteListCreate(APIView):
    throttle_classes = [TenantRateThrottle]

    @idempotent(required=True, fields=("text",))
    def post(self, request: Request) -> Response:
        return _create(request)


class WaitingNoteCreate(APIView):
    """The same create under the ``wait`` policy: a duplicate waits (up to 5 s) and replays."""

    @idempotent(required=True, fields=("text",), in_flight="wait", wait_seconds=5.0)
    def post(self, request: Request) -> Response:
        return _create(request)


class AutoKeyNoteCreate(APIView):
    """The create with an automatic key for keyless requests; a text listed in
    ``behaviour["refuse"]`` is refused with 409 before anything is written."""

    @idempotent(fields=("text",), auto_key_window=60)
    def post(self, request: Request) -> Response:
        if str(request.data.get("text", "")) in behaviour["refuse"]:
            return Response({"code": "REFUSED"}, status=409)
        return _create(request)


class RememberingNoteCreate(APIView):
    """A create whose note remembers the key that wrote it (its text is the business key, as an
    order keeps its key under a unique constraint), and says so for a token the engine no
    longer knows (``recall``): 409 ``NOTE_ALREADY_WRITTEN`` naming the note."""

    @idempotent(required=True, fields=("text",), recall=lambda view, request: _written(request))
    def post(self, request: Request) -> Response:
        note = _write(request, request.idempotency.business_key)
        return Response({"id": note.pk if note else None}, status=201)


def _written(request: Request) -> Response | None:
    note = Note.objects.filter(text=request.idempotency.business_key).first()
    if note is None:
        return None
    return Response({"code": "NOTE_ALREADY_WRITTEN", "id": note.pk}, status=409)


class AttachmentNoteCreate(APIView):
    """A multipart create: a text, an uploaded file and a repeated ``tags`` field define it;
    the note keeps the text and the file's content, so a test sees the view read the file."""

    @idempotent(required=True, fields=("text", "attachment", "tags"))
    def post(self, request: Request) -> Response:
        upload = request.data.get("attachment")
        content = upload.read().decode() if upload is not None else ""
        note = _write(request, f"{request.data.get('text', '')}:{content}")
        assert note is not None
        body = {"id": note.pk, "text": note.text, "tags": request.data.getlist("tags")}
        return Response(body, status=201)


def _create(request: Request) -> Response:
    text = str(request.data.get("text", ""))
    if text in behaviour["refuse_after_write"]:
        return _refuse_after_writing(request, text)
    note = _write(request, text)
    if note is None:
        return Response({"detail": "failed"}, status=500)
    body = {"id": note.pk, "text": note.text, "run": uuid.uuid4().hex}
    return Response(body, status=201, headers={"Location": f"/notes/{note.pk}/"})


class _Refused(Exception):
    pass


def _refuse_after_writing(request: Request, text: str) -> Response:
    """What a service that refuses after its first write does: the note is written and a
    callback registered for the commit (it would append to ``behaviour["committed"]``), then
    the business transaction raises, which dooms it, and the view answers 409."""
    try:
        with business_atomic():
            _write(request, text)
            transaction.on_commit(lambda: behaviour["committed"].append(text))
            raise _Refused
    except _Refused:
        return Response({"code": "REFUSED"}, status=409)


class DeliveryCreate(APIView):
    """A write whose answer carries a diner's personal data, redacted from stored replies."""

    @idempotent(required=True, redact=("diner.phone", "delivery.address", "payment.card_hint"))
    def post(self, request: Request) -> Response:
        note = _write(request, str(request.data.get("text", "")))
        if note is None:
            return Response({"detail": "failed"}, status=500)
        body = {
            "id": note.pk,
            "text": note.text,
            "diner": request.data.get("diner"),
            "delivery": request.data.get("delivery"),
            "payment": request.data.get("payment"),
            "run": uuid.uuid4().hex,
        }
        return Response(body, status=201, headers={"Location": f"/notes/{note.pk}/"})


@idempotent_form(fields=("text",))
def note_form(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        if not request.POST.get("text"):  # the form again, with its error
            return render(request, "testapp/note_form.html", {"error": "required"}, status=400)
        note = _write(request, request.POST.get("text", ""))
        if note is None:
            return HttpResponse("failed", status=500)
        return redirect(f"/notes/{note.pk}/")
    return render(request, "testapp/note_form.html")


@idempotent_form(fields=("text", "attachment"))
def note_form_upload(request: HttpRequest) -> HttpResponse:
    """A form with a file: the note keeps the text and the file's content."""
    upload = request.FILES.get("attachment")
    content = upload.read().decode() if upload is not None else ""
    note = _write(request, f"{request.POST.get('text', '')}:{content}")
    return redirect(f"/notes/{note.pk}/" if note is not None else "/notes/form/")


@idempotent_form()
def note_json(request: HttpRequest) -> HttpResponse:
    """A plain Django view that reads a JSON body (a page's script posts it), not a form."""
    note = _write(request, str(json.loads(request.body)["text"]))
    body = {"id": note.pk if note is not None else None, "text": note.text if note else ""}
    return HttpResponse(json.dumps(body), status=201, content_type="application/json")


def _send_note(request: HttpRequest) -> HttpResponse:
    note = _write(request, request.POST.get("text", ""))
    return redirect(f"/notes/{note.pk}/" if note is not None else "/notes/form/")


# Forms posting to a URL that takes only POST, as a dashboard's buttons do: a refused one is
# sent to the page the view names when the browser gave no Referer
note_send = require_POST(idempotent_form(fields=("text",), form_page="note-form")(_send_note))
note_send_to_board = require_POST(
    idempotent_form(
        fields=("text",), form_page=lambda request, board: f"/notes/form/?board={board}"
    )(lambda request, board: _send_note(request))
)


# Streamed answers: the note is written, then the body is produced chunk by chunk as it is
# sent; ``behaviour["chunks_sent"]`` counts the chunks produced so far.
STREAM_CHUNKS = (b"id,text\n", b"1,soup\n", b"2,bread\n")


def _chunks() -> Iterator[bytes]:
    for chunk in STREAM_CHUNKS:
        behaviour["chunks_sent"] += 1
        yield chunk


class NoteStreamCreate(APIView):
    """A create whose answer is a ``StreamingHttpResponse`` of unknown length."""

    @idempotent(required=True, fields=("text",))
    def post(self, request: Request) -> StreamingHttpResponse:
        _write(request, str(request.data.get("text", "")))
        return StreamingHttpResponse(_chunks(), status=201, content_type="text/csv")


class NoteFileCreate(APIView):
    """A create whose answer is a ``FileResponse`` (its length declared)."""

    @idempotent(required=True, fields=("text",))
    def post(self, request: Request) -> FileResponse:
        _write(request, str(request.data.get("text", "")))
        return FileResponse(io.BytesIO(b"".join(STREAM_CHUNKS)), content_type="text/csv")


@idempotent_form(fields=("text",))
def note_form_stream(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """A form whose answer is streamed (an export, say)."""
    if request.method == "POST":
        _write(request, request.POST.get("text", ""))
        return StreamingHttpResponse(_chunks(), content_type="text/csv")
    return render(request, "testapp/note_form.html")


class NoteExport(APIView):
    """A GET that writes (an export run, say): the decorator protects the handler it is on,
    whichever method that is; Django runs it for a HEAD too."""

    @idempotent(required=True, fields=())
    def get(self, request: Request) -> Response:
        note = _write(request, "export")
        assert note is not None
        return Response({"id": note.pk, "run": uuid.uuid4().hex})


class LocatedNoteCreate(APIView):
    """The create with the ``Location`` the request names (``{pk}`` is the note's id), for
    replays of a body kept as a pointer to a resource that cannot be rendered."""

    @idempotent(required=True, fields=("text", "location"))
    def post(self, request: Request) -> Response:
        note = _write(request, str(request.data.get("text", "")))
        location = str(request.data["location"]).format(pk=note.pk)
        return Response(
            {"id": note.pk, "text": note.text}, status=201, headers={"Location": location}
        )


def show_note_as_asked(request: HttpRequest, pk: int) -> HttpResponse:
    """A resource view whose rendering its query string chooses (``?part=head``: the first
    five characters of the text), for pointer replays of a ``Location`` that carries one."""
    text = Note.objects.get(pk=pk).text
    return HttpResponse(text[:5] if request.GET.get("part") == "head" else text)


async def show_note_async(request: HttpRequest, pk: int) -> HttpResponse:
    """An ``async def`` resource view (raises ``Note.DoesNotExist`` for a deleted note)."""
    note = await Note.objects.aget(pk=pk)
    return HttpResponse(f"note {note.text}")


def show_note_strictly(request: HttpRequest, pk: int) -> HttpResponse:
    """A resource view that raises ``Note.DoesNotExist`` for a deleted note (a 500 if served)."""
    return HttpResponse(f"note {Note.objects.get(pk=pk).text}")


class NoteSerializer(ModelSerializer):
    class Meta:
        model = Note
        fields = ("id", "text")


class NoteDetail(RetrieveAPIView):
    """A DRF detail view: a deleted note is its 404 ``{"detail": "No Note matches…"}``."""

    queryset = Note.objects.all()
    serializer_class = NoteSerializer


@method_decorator(idempotent_form(fields=("text",)), name="post")
class NoteFormView(View):
    """The form view as a class: the README's way to decorate a class-based view's ``post``."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, "testapp/note_form.html")

    def post(self, request: HttpRequest) -> HttpResponse:
        note = _write(request, request.POST.get("text", ""))
        return redirect(f"/notes/{note.pk}/" if note is not None else "/notes/form/")


@method_decorator(idempotent_form(fields=("text",)), name="post")
class NoteCreateView(CreateView):
    """Django's generic create view: an invalid form answers its page as a ``TemplateResponse``
    (status 200), which Django renders only after the view returned."""

    model = Note
    fields = ["text"]
    template_name = "testapp/note_create.html"

    def form_valid(self, form: Any) -> HttpResponse:
        note = _write(self.request, form.cleaned_data["text"])
        return redirect(f"/notes/{note.pk}/" if note is not None else "/notes/form/")
