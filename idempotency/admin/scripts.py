"""Staff workflow for the engine's Lua scripts: upload, canary, promote, roll back.

What Redis runs for every tenant is a superuser's decision: uploading and the three actions are
superuser-only (the ``manage_scripts`` action permission, :meth:`has_manage_scripts_permission`);
other staff with the model's view permission can read versions and their history. Each step asks
for the SHA-256 of the source it makes live, as reviewed. Uploading compiles the script in Redis
first; a version moves on only after ``manage.py check_lua_version`` ran the contract tests
against it. Every step is written to ``LuaScriptChange`` with the user's name, and running
processes pick it up within seconds (pub/sub), with no restart.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from idempotency.admin.lookups import OfferedFiltersOnly
from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.versions import (
    KNOWN_SCRIPTS,
    ScriptRejected,
    promote,
    rollback,
    rollback_target,
    start_canary,
    upload_version,
)

CONFIRM_TEMPLATE = "admin/idempotency/luascriptversion/confirm_change.html"


def reviewed_sha256_field() -> forms.CharField:
    return forms.CharField(
        label="Reviewed SHA-256",
        min_length=64,
        max_length=64,
        help_text="The SHA-256 of the source you reviewed; the change is refused if it differs.",
    )


class UploadForm(forms.ModelForm):
    author = ""
    name = forms.ChoiceField(choices=[(n, n) for n in KNOWN_SCRIPTS])
    # Kept byte for byte (no stripping) but for the CRLF line ends browsers send from a
    # textarea, so the SHA-256 is the one of the file as reviewed.
    source = forms.CharField(widget=forms.Textarea, strip=False)
    reviewed_sha256 = reviewed_sha256_field()

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
                source=data["source"].replace("\r\n", "\n"),
                author=self.author,
                reviewed_sha256=data["reviewed_sha256"],
            )
        except ScriptRejected as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


class ReviewForm(forms.Form):
    """The confirmation every change asks for."""

    reviewed_sha256 = reviewed_sha256_field()


# A canary's audience, bounded: every process holds it in memory (the registry's cache) and
# the change log keeps it; typed as it came, 50,000 ids of a 250 KB form were saved as readily
# as one. A tenant's key is at most 64 characters (IdempotencyRecord.tenant_key).
MAX_AUDIENCE = 1000
MAX_AUDIENCE_ENTRY = 64


class CanaryForm(ReviewForm):
    percent = forms.IntegerField(min_value=0, max_value=100, initial=5)
    tenants = forms.CharField(required=False, help_text="Tenant ids, comma-separated")
    regions = forms.CharField(required=False, help_text="Regions, comma-separated")

    def clean_tenants(self) -> str:
        return _audience(self.cleaned_data["tenants"], "tenant ids")

    def clean_regions(self) -> str:
        return _audience(self.cleaned_data["regions"], "regions")


def _audience(raw: str, what: str) -> str:
    entries = _split(raw)
    if len(entries) > MAX_AUDIENCE:
        raise forms.ValidationError(f"At most {MAX_AUDIENCE:,} {what}, comma-separated.")
    if any(len(entry) > MAX_AUDIENCE_ENTRY for entry in entries):
        raise forms.ValidationError(f"Each of at most {MAX_AUDIENCE_ENTRY} characters.")
    return raw


class ChangeInline(admin.TabularInline):
    model = LuaScriptChange
    extra = 0
    can_delete = False
    readonly_fields = ["at", "action", "author", "detail"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(LuaScriptVersion)
class LuaScriptVersionAdmin(OfferedFiltersOnly, admin.ModelAdmin):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _is_superuser(request)

    def has_manage_scripts_permission(self, request: HttpRequest) -> bool:
        """Who may change what runs: canary, promote, roll back (the actions declare it)."""
        return _is_superuser(request)

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

    @admin.action(
        description="Start canary (percent, tenants, regions)", permissions=["manage_scripts"]
    )
    def canary(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> Any:
        script = self._one(request, queryset)
        if script is None:
            return None
        form = CanaryForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            return self._apply(
                request,
                lambda: start_canary(
                    script,
                    author=request.user.get_username(),
                    reviewed_sha256=form.cleaned_data["reviewed_sha256"],
                    percent=form.cleaned_data["percent"],
                    tenants=_split(form.cleaned_data["tenants"]),
                    regions=_split(form.cleaned_data["regions"]),
                ),
                f"{script} is the canary now.",
            )
        return self._confirm(
            request,
            script,
            form,
            action="canary",
            title=f"Canary audience of {script}",
            explain=(
                f"Tenants in the audience run {script}; everyone else keeps the stable version. "
                "A percentage selects tenants by a stable hash of their id into 100 buckets."
            ),
            submit="Start canary",
        )

    @admin.action(description="Promote to stable", permissions=["manage_scripts"])
    def promote_to_stable(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> Any:
        script = self._one(request, queryset)
        if script is None:
            return None
        form = ReviewForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            return self._apply(
                request,
                lambda: promote(
                    script,
                    author=request.user.get_username(),
                    reviewed_sha256=form.cleaned_data["reviewed_sha256"],
                ),
                f"{script.name} v{script.version} is stable now.",
            )
        return self._confirm(
            request,
            script,
            form,
            action="promote_to_stable",
            title=f"Promote {script}",
            explain=f"Every tenant will run {script}; the current stable version is retired.",
            submit="Promote",
        )

    @admin.action(
        description="Roll back (drop the canary, else restore the previous stable)",
        permissions=["manage_scripts"],
    )
    def roll_back(self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]) -> Any:
        names = sorted(set(queryset.values_list("name", flat=True)))
        if len(names) != 1:
            self.message_user(request, "Select versions of one script.", messages.WARNING)
            return None
        name = names[0]
        try:
            target = rollback_target(name)
        except ScriptRejected as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        form = ReviewForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            return self._apply(
                request,
                lambda: rollback(
                    name=name,
                    author=request.user.get_username(),
                    reviewed_sha256=form.cleaned_data["reviewed_sha256"],
                ),
                f"{name} rolled back.",
            )
        runs = f"v{target.version}" if target.version else "the shipped script"
        return self._confirm(
            request,
            queryset.first(),
            form,
            action="roll_back",
            title=f"Roll back {name}",
            explain=f"After the rollback, {name} runs {runs}: give the SHA-256 of that source.",
            submit="Roll back",
        )

    def _one(
        self, request: HttpRequest, queryset: QuerySet[LuaScriptVersion]
    ) -> LuaScriptVersion | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version.", messages.WARNING)
            return None
        return queryset.get()

    def _confirm(
        self,
        request: HttpRequest,
        script: LuaScriptVersion | None,
        form: forms.Form,
        *,
        action: str,
        title: str,
        explain: str,
        submit: str,
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "script": script,
            "form": form,
            "action": action,
            "explain": explain,
            "submit": submit,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, CONFIRM_TEMPLATE, context)

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


def _is_superuser(request: HttpRequest) -> bool:
    """Whether the admin's user is a superuser. A custom user model without
    ``PermissionsMixin`` (an ``AbstractBaseUser`` with the ``is_staff``, ``has_perm`` and
    ``has_module_perms`` Django's admin asks for) has no ``is_superuser``: its users are none,
    and every admin page, the index included, must not fail on reading the flag."""
    return bool(getattr(request.user, "is_superuser", False))
