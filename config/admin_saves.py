"""A model admin whose Save writes only the fields staff changed on the page.

Django's admin saves the whole row as the POST read it, the fields the page shows read-only
included. Where something else moves those fields meanwhile (an order taking a dish's stock or
a coupon's use, a key or a diner session revoked on the dashboard, a diner signing out), the
Save wrote the value from before back over it: a portion sold twice, a coupon used past its
limit, a revoked key or an ended session live again.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class SavesChangedFieldsOnly(admin.ModelAdmin):
    """Saves a changed row's changed fields only (none, when every field is read-only); an
    added row is saved whole."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save(update_fields=form.changed_data if change else None)
