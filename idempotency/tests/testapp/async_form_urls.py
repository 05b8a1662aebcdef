"""A URLconf whose class-based form view has an ``async def post`` under ``method_decorator``
(``test_an_async_class_based_form_view_is_an_error_before_any_request``)."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.utils.decorators import method_decorator
from django.views import View

from idempotency import idempotent_form


@method_decorator(idempotent_form(fields=("text",)), name="post")
class AsyncNoteFormView(View):
    async def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("saved")


urlpatterns = [
    path("", include("idempotency.tests.testapp.urls")),
    path("notes/form/async/", AsyncNoteFormView.as_view(), name="note-form-async"),
]
