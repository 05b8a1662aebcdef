"""Changelist filters from the URL only through the filters a changelist offers.

Django's admin lets any query parameter naming a field of the model itself filter its
changelist (``?response_body__contains=…``), shown or not. The count of rows a filter leaves
is then an oracle: a staff user allowed to list stored records but not to read their bodies
recovered a diner's note one character at a time. With this mixin a changelist takes only the
lookups of its ``list_filter`` and ``date_hierarchy``; any other is refused (400).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest


class OfferedFiltersOnly:
    """For a ``ModelAdmin``: URL lookups only on the fields its filters offer."""

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        offered = _offered(self, request)  # type: ignore[arg-type]
        if lookup not in offered and lookup.split(LOOKUP_SEP, 1)[0] not in offered:
            return False
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]


def _offered(model_admin: admin.ModelAdmin, request: HttpRequest | None) -> set[str]:
    """The parameters and first fields of the changelist's own filters."""
    filters = model_admin.get_list_filter(request) if request else model_admin.list_filter
    offered = {model_admin.date_hierarchy} if model_admin.date_hierarchy else set()
    for item in filters:
        if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
            offered.add(item.parameter_name)
        else:
            path = item[0] if isinstance(item, list | tuple) else item
            offered.add(path.split(LOOKUP_SEP, 1)[0])
    return offered
