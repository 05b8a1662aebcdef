from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from idempotency.tests.testapp import quickstart, views


def show_note(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(f"note {pk}")


urlpatterns = [
    path("notes/", views.NoteListCreate.as_view(), name="notes"),
    path("notes/wait/", views.WaitingNoteCreate.as_view(), name="notes-wait"),
    path("notes/auto/", views.AutoKeyNoteCreate.as_view(), name="notes-auto"),
    path("notes/remembering/", views.RememberingNoteCreate.as_view(), name="notes-remembering"),
    path("notes/attachment/", views.AttachmentNoteCreate.as_view(), name="notes-attachment"),
    path("deliveries/", views.DeliveryCreate.as_view(), name="deliveries"),
    path("notes/form/", views.note_form, name="note-form"),
    path("notes/form/class/", views.NoteFormView.as_view(), name="note-form-class"),
    path("notes/form/generic/", views.NoteCreateView.as_view(), name="note-form-generic"),
    path("notes/form/send/", views.note_send, name="note-send"),
    path("notes/form/upload/", views.note_form_upload, name="note-form-upload"),
    path("notes/form/json/", views.note_json, name="note-form-json"),
    path("notes/form/<slug:board>/send/", views.note_send_to_board, name="note-send-to-board"),
    path("notes/<int:pk>/", show_note, name="note"),
    path("notes/<int:pk>/strict/", views.show_note_strictly, name="note-strict"),
    path("notes/<int:pk>/async/", views.show_note_async, name="note-async"),
    path("notes/<int:pk>/as-asked/", views.show_note_as_asked, name="note-as-asked"),
    path("notes/<int:pk>/api/", views.NoteDetail.as_view(), name="note-api"),
    path("notes/stream/", views.NoteStreamCreate.as_view(), name="notes-stream"),
    path("notes/file/", views.NoteFileCreate.as_view(), name="notes-file"),
    path("notes/form/stream/", views.note_form_stream, name="note-form-stream"),
    path("notes/located/", views.LocatedNoteCreate.as_view(), name="notes-located"),
    path("notes/export/", views.NoteExport.as_view(), name="notes-export"),
    path("quickstart/notes/", quickstart.CreateNote.as_view(), name="quickstart-notes"),
    path("quickstart/add/", quickstart.add_note, name="quickstart-add"),
    path("api/", include("idempotency.web.urls")),
]
