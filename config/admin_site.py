"""The admin site: every model admin registered on it, ours and the installed apps' (users,
groups, login records), filters its changelist from the URL only through the filters it
offers (``idempotency.admin.lookups``), so a staff user cannot probe a column the admin does
not show — a stored reply body, a password hash — by counting the rows a filter leaves."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig

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


class PlatformAdminConfig(AdminConfig):
    default_site = "config.admin_site.PlatformAdminSite"
