"""Tenants by name in the engine's admin lists, though the engine knows them only by key.

Records and audits carry an opaque ``tenant_key`` ("1"); the host application names its
tenants through the ``TENANT_LABELS`` hook (``(keys) -> {key: label}``). Labels of a page's
rows are looked up in one call, and the tenant filter lists tenants by label too. Without the
hook the key is shown. The filter's tenants are read by a walk of the ``tenant_key`` index
(:mod:`idempotency.admin.distinct`), not a ``DISTINCT`` over every row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest

from idempotency.admin.distinct import distinct_values
from idempotency.admin.paging import IndexSortedChangeList
from idempotency.core.conf import engine_hook


def tenant_labels(keys: Iterable[str]) -> dict[str, str]:
    keys = sorted(set(keys))
    hook = engine_hook("TENANT_LABELS")
    labels = hook(keys) if hook and keys else {}
    return {key: labels.get(key, key) for key in keys}


class LabelledChangeList(IndexSortedChangeList):
    """Puts ``tenant_label`` on each row of the page, from one lookup for the page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # evaluates the page once; the template reuses it
        labels = tenant_labels(row.tenant_key for row in rows)
        for row in rows:
            row.tenant_label = labels[row.tenant_key]


class TenantFilter(admin.SimpleListFilter):
    title = "tenant"
    parameter_name = "tenant_key"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        labels = tenant_labels(distinct_values(model_admin.model, "tenant_key"))
        return sorted(labels.items(), key=lambda item: item[1].lower())

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(tenant_key=self.value()) if self.value() else queryset


class TenantLabelsMixin:
    """For model admins of rows with a ``tenant_key``: a ``tenant`` column and filter."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LabelledChangeList

    @admin.display(description="tenant", ordering="tenant_key")
    def tenant(self, obj: Any) -> str:
        label = getattr(obj, "tenant_label", None)
        return label if label is not None else tenant_labels([obj.tenant_key])[obj.tenant_key]
