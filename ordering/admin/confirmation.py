"""A page that asks staff to confirm an admin action that cannot be undone.

Django's own "Delete selected" shows what it will delete and waits for a second POST; the
actions that erase people's data or a whole restaurant do the same here. The action is posted
again with ``apply`` and the page's form; until that form is valid nothing is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse


@dataclass(frozen=True)
class Confirmation:
    """What the page says: the consequence, the rows acted on, and the button's words."""

    title: str
    consequence: str
    headers: Sequence[str]
    rows: Sequence[Sequence[object]]
    submit: str


def confirmed_form(request: HttpRequest, form_class: type[forms.Form], **kwargs: Any) -> forms.Form:
    """The page's form, bound only when the page itself was posted (``apply``)."""
    return form_class(request.POST if "apply" in request.POST else None, **kwargs)


def confirmation_page(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    action: str,
    pks: Sequence[object],
    form: forms.Form,
    page: Confirmation,
) -> TemplateResponse:
    context: dict[str, Any] = {
        **modeladmin.admin_site.each_context(request),
        "opts": modeladmin.model._meta,
        "title": page.title,
        "page": page,
        "form": form,
        "pks": pks,
        "action_name": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/ordering/confirm_action.html", context)
