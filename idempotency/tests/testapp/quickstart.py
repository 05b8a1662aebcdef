"""The README's quick start, verbatim (``test_readme.py`` checks the README quotes this file
and runs these views)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency import idempotent, idempotent_form

from .models import Note


def scope(request):
    """IDEMPOTENCY["SCOPE_RESOLVER"]: whose key is it? (None: not idempotent)"""
    if not request.user.is_authenticated:
        return None
    return ("my-site", f"user:{request.user.pk}")


class CreateNote(APIView):
    permission_classes = [IsAuthenticated]  # the resolver scopes signed-in users only

    @idempotent(required=True, fields=("text",))
    def post(self, request):
        note = Note.objects.create(text=request.data["text"])
        return Response({"id": note.pk, "text": note.text}, status=201)


@login_required  # the resolver scopes signed-in users only
@idempotent_form(fields=("text",))
def add_note(request):
    if request.method == "POST":
        note = Note.objects.create(text=request.POST["text"])
        return redirect(f"/notes/{note.pk}/")
    return render(request, "testapp/add_note.html")  # {% idempotency_field %} in the form
