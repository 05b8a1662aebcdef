"""The admin's date drill-down (``date_hierarchy``) offered from a list's first and last row.

Django's drill-down lists the years (months, days) that hold rows with ``SELECT DISTINCT
date_trunc(…)`` over every row of the list: seconds over millions of audits or orders, on
every view of the list. Here the periods are those between the list's first and last row
(``MIN`` and ``MAX``, read from the column's index), so a period with no row in between is
offered too, and picking it lists nothing.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.db.models import Max, Min, QuerySet
from django.template.base import Parser, Token
from django.utils import timezone

register = template.Library()


def periods(queryset: QuerySet[Any], field_name: str, kind: str) -> list[Any]:
    """The starts of each ``kind`` ("year", "month" or "day") from the first to the last
    value of ``field_name`` in ``queryset``, as Django's ``datetimes()`` gives them (in the
    current time zone) or, for a date field, as ``dates()`` does."""
    span = queryset.aggregate(first=Min(field_name), last=Max(field_name))
    first, last = span["first"], span["last"]
    if first is None or last is None:
        return []
    aware = isinstance(first, datetime)
    if aware:
        first, last = timezone.localtime(first).date(), timezone.localtime(last).date()
    starts: list[date] = []
    if kind == "year":
        starts = [date(year, 1, 1) for year in range(first.year, last.year + 1)]
    elif kind == "month":
        months = range(first.year * 12 + first.month - 1, last.year * 12 + last.month)
        starts = [date(m // 12, m % 12 + 1, 1) for m in months]
    elif kind == "day":
        starts = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    if not aware:
        return starts
    return [timezone.make_aware(datetime(d.year, d.month, d.day)) for d in starts]


class _SpannedQuerySet:
    """What the drill-down asks of a changelist's queryset, its periods by :func:`periods`."""

    def __init__(self, queryset: QuerySet[Any]) -> None:
        self._queryset = queryset

    def aggregate(self, **aggregates: Any) -> dict[str, Any]:
        return self._queryset.aggregate(**aggregates)

    def datetimes(self, field_name: str, kind: str) -> list[Any]:
        return periods(self._queryset, field_name, kind)

    dates = datetimes


class _Spanned:
    """A changelist whose queryset offers periods by :func:`periods`."""

    def __init__(self, changelist: Any) -> None:
        self._changelist = changelist
        self.queryset = _SpannedQuerySet(changelist.queryset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._changelist, name)


def spanned_date_hierarchy(changelist: Any) -> dict[str, Any] | None:
    return date_hierarchy(_Spanned(changelist))


@register.tag(name="spanned_date_hierarchy")
def spanned_date_hierarchy_tag(parser: Parser, token: Token) -> InclusionAdminNode:
    """``{% spanned_date_hierarchy cl %}``: Django's drill-down, from the first and last row."""
    return InclusionAdminNode(
        parser,
        token,
        func=spanned_date_hierarchy,
        template_name="date_hierarchy.html",
        takes_context=False,
    )
