"""Admin lists over tables that grow with history, paged at a cost that does not.

Django's admin counts every row a list holds on each page view (``SELECT COUNT(*)``, and a
second count of the whole table when a filter is on), and reaches a deep page by ``OFFSET``,
reading every row before it. Over millions of records, audits or orders each costs seconds,
on every view of the list. Here a list counts at most ``COUNT_LIMIT`` rows (a count over a
``LIMIT``: reading stops there) and pages through those, the newest first; past them the list
says "more than" and staff narrow it with a filter, the search box or the date drill-down,
where the count is exact again once it fits.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.utils.functional import cached_property

# 100 pages of the admin's 100 rows: an index read of 10,000 rows at most, per view
COUNT_LIMIT = 10_000


class BoundedCountPaginator(Paginator):
    """A paginator whose ``count`` stops at ``COUNT_LIMIT``; ``more`` says rows lie past it,
    and pages end there."""

    limit = COUNT_LIMIT

    @cached_property
    def _bounded(self) -> int:
        """The rows, counted up to one past the limit (one statement, reading no further).
        Counted unordered: how many rows there are does not depend on their order, and a
        list sorted by a column no index serves had its whole table sorted to count them."""
        object_list: Any = self.object_list
        if hasattr(object_list, "query"):
            return object_list.order_by()[: self.limit + 1].count()
        return len(object_list[: self.limit + 1])

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        return min(self._bounded, self.limit)

    @property
    def more(self) -> bool:
        """Whether the list holds more rows than ``count`` (and its pages) reach."""
        return self._bounded > self.limit


class BoundedCountList:
    """For a ``ModelAdmin`` of a table that grows with history: a bounded count, no second
    count of the whole table beside a filtered one (``show_full_result_count``), and no facet
    counts (a count over the whole list per filter choice)."""

    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER


class IndexSortedChangeList(ChangeList):
    """A changelist sorted only by its admin's ``sortable_by`` columns, from the URL too:
    Django leaves the other columns' headers without a sort link but still sorts by one that
    ``?o=`` names. A list of millions sorted by a column no index serves is a sort of the whole
    table on every page view."""

    def get_ordering_field(self, field_name: Any) -> Any:
        if field_name not in self.sortable_by:
            return None  # Django's changelist skips it, as a column with no sort field
        return super().get_ordering_field(field_name)
