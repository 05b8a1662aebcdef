"""Changelist filters from the URL only through the filters a changelist offers.

Django's admin lets any query parameter naming a field of the model itself filter its
changelist (``?response_body__contains=…``), shown or not. The count of rows a filter leaves
is then an oracle: a staff user allowed to list stored records but not to read their bodies
recovered a diner's note one character at a time. With this mixin a changelist takes only the
lookups of its ``list_filter`` and ``date_hierarchy``; any other is refused (400).

A year a date cannot have (``?created_at__year=99999``, ``__year__gte=10000``,
``__iso_year=0``) is refused too: Django finds the year's first and last instant with
``datetime()``, which holds the years 1 to 9999 only, and its ValueError, raised as the list
was counted, was a 500 on every list with a date filter.
"""

from __future__ import annotations

from datetime import MAXYEAR, MINYEAR
from typing import Any

from django.contrib import admin
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

# the transforms whose lookups Django answers with the year's bounds, and those lookups
_YEARS = frozenset({"year", "iso_year"})
_YEAR_BOUNDED = frozenset({"exact", "gt", "gte", "lt", "lte"})


class OfferedFiltersOnly:
    """For a ``ModelAdmin``: URL lookups only on the fields its filters offer, and no year a
    date cannot have."""

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        offered = _offered(self, request)  # type: ignore[arg-type]
        if lookup not in offered and lookup.split(LOOKUP_SEP, 1)[0] not in offered:
            return False
        if _a_year_no_date_has(lookup, value):
            return False
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]


def _a_year_no_date_has(lookup: str, value: Any) -> bool:
    """Whether ``lookup`` compares a field's year (``<field>__year[__gte]``) with a year
    outside ``datetime``'s 1 to 9999. A value that is no number is left to Django, which
    refuses it as it builds the query (a 400)."""
    parts = lookup.split(LOOKUP_SEP)
    for at, part in enumerate(parts[1:], start=1):
        if part in _YEARS:
            rest = parts[at + 1 :]
            if len(rest) > 1 or (rest and rest[0] not in _YEAR_BOUNDED):
                return False
            try:
                year = int(value)
            except (TypeError, ValueError):
                return False
            return not MINYEAR <= year <= MAXYEAR
    return False


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
