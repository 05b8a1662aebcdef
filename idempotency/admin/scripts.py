"""Staff workflow for the engine's Lua scripts: upload, canary, promote, roll back.

Uploading compiles the script in Redis first (and checks the SHA-256 the reviewer states); a
version moves on only after ``manage.py check_lua_version`` ran the contract tests against it.
Every step is written to ``LuaScriptChange`` with the staff user's name, and running processes
pick it up within seconds (pub/sub), with no restart.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.versions import (
    KNOWN_SCRIPTS,
    ScriptRejected,
    promote,
    rollback,
    start_canary,
    upload_version,
)


class UploadForm(forms.ModelForm):
    author = ""
    name = forms.ChoiceField(choices=[(n, n) for n in KNOWN_SCRIPTS])
    expected_sha256 = forms.CharField(
        required=False,
        max_length=64,
        help_text="The SHA-256 of the source you reviewed; the upload is refused if it differs.",
    )

    class Meta:
        model = LuaScriptVersion
        fields = ["name", "source"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        try:
            self.instance = upload_version(
                name=data["name"],
                source=data["source"],
                author=self.author,
                expected_sha256=data.get("expected_sha256") or None,
            )
        except ScriptRejected as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


class CanaryForm(forms.Form):
    percent = forms.IntegerField(min_value=0, max_value=100, initial=5)
    tenants = forms.CharField(required=False, help_text="Tenant ids, comma-separated")
    regions = forms.CharField(required=False, help_text="Regions, comma-separated")


class ChangeInline(admin.TabularInline):
    model = LuaScriptChange
    extra = 0
    can_delete = False
    readonly_fields = ["at", "action", "author", "detail"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(LuaScriptVersion)
class LuaScriptVersionAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "version",
        "state",
        "canary_percent",
        "author",
        "created_at",
        "contract_passed_at",
    ]
    list_filter = ["name", "state"]
    actions = ["canary", "promote_to_stable", "roll_back"]
    inlines = [ChangeInline]
    readonly_fields = [
        "name",
        "version",
        "source",
        "sha256",
        "redis_sha1",
        "author",
        "created_at",
        "state",
        "canary_percent",
        "canary_tenants",
        "canary_regions",
        "contract_passed_at",
        "check_command",
    ]

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        if obj is not None:
            return super().get_form(request, obj, **kwargs)
        # A form class per request: the author travels with it, never shared between requests.
        return type("UploadFormOf", (UploadForm,), {"author": request.user.get_username()})

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        # The add form is only the upload (no formset beside it: the upload happens in clean).
        return self.inlines if obj is not None else []

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.readonly_fields if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Saved by ``upload_version`` in the form's validation already."""

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="Contract tests")
    def check_command(self, obj: LuaScriptVersion) -> str:
        return f"python manage.py check_lua_version {obj.name} {obj.version}"

    @admin.action(description="Start canary (percent, tenants, regions)")
    def canary(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> Any:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version.", messages.WARNING)
            return None
        script = queryset.get()
        form = CanaryForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            return self._apply(
                request,
                lambda: start_canary(
                    script,
                    author=request.user.get_username(),
                    percent=form.cleaned_data["percent"],
                    tenants=_split(form.cleaned_data["tenants"]),
                    regions=_split(form.cleaned_data["regions"]),
                ),
                f"{script} is the canary now.",
            )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Canary audience of {script}",
            "opts": self.model._meta,
            "script": script,
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/idempotency/luascriptversion/canary.html", context)

    @admin.action(description="Promote to stable")
    def promote_to_stable(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> None:
        for script in queryset:
            self._apply(
                request,
                lambda script=script: promote(script, author=request.user.get_username()),
                f"{script.name} v{script.version} is stable now.",
            )

    @admin.action(description="Roll back (drop the canary, else restore the previous stable)")
    def roll_back(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> None:
        for name in sorted(set(queryset.values_list("name", flat=True))):
            self._apply(
                request,
                lambda name=name: rollback(name=name, author=request.user.get_username()),
                f"{name} rolled back.",
            )

    def _apply(self, request: HttpRequest, step: Any, done: str) -> HttpResponse | None:
        try:
            step()
        except ScriptRejected as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, done, messages.SUCCESS)
        return None


def _split(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]
