"""The admin site: every model admin registered on it, ours and the installed apps' (users,
groups, login records), filters its changelist from the URL only through the filters it
offers (``idempotency.admin.lookups``), so a staff user cannot probe a column the admin does
not show — a stored reply body, a password hash — by counting the rows a filter leaves. Its
"Change password" page checks the current password as a sign-in does
(``tenants/password_forms.py``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from idempotency.admin.lookups import OfferedFiltersOnly


class PlatformAdminSite(admin.AdminSite):
    def register(
        self,
        model_or_iterable: Any,
        admin_class: type[admin.ModelAdmin] | None = None,
        **options: Any,
    ) -> None:
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, OfferedFiltersOnly):
            admin_class = type(admin_class.__name__, (OfferedFiltersOnly, admin_class), {})
        super().register(model_or_iterable, admin_class, **options)

    def password_change(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Django's page, with the current password counted by the login lockout."""
        # imported here, as Django's method does: this module loads before the models
        from tenants.password_forms import RequestInForm, StaffPasswordChangeForm

        request.current_app = self.name
        view = RequestInForm.as_view(
            form_class=StaffPasswordChangeForm,
            success_url=reverse("admin:password_change_done", current_app=self.name),
            extra_context={**self.each_context(request), **(extra_context or {})},
            template_name=self.password_change_template or "registration/password_change_form.html",
        )
        return view(request)


class PlatformAdminConfig(AdminConfig):
    default_site = "config.admin_site.PlatformAdminSite"
