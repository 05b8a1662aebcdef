"""The distinct values of an indexed column, for the choices of an admin list's filter.

A filter offering "every tenant" or "every endpoint" asked ``SELECT DISTINCT`` over the whole
table: PostgreSQL reads every row (or every index entry) for a handful of values, seconds over
millions of audits or records, on every view of the list. Here PostgreSQL walks the column's
index instead, one lookup per value ("the first value after the last one found", a recursive
query), so the cost follows how many values there are, not how many rows. A column no
index serves offers a fixed list of values instead (:func:`fixed_values_filter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db import connections, models, router
from django.http import HttpRequest


def distinct_values(model: type[models.Model], field_name: str) -> list[Any]:
    """Every value ``field_name`` holds in ``model``'s table (NULL left out), in order. The
    column must lead an index for this to be cheap; on another database than PostgreSQL (the
    embedded demo) it is a plain ``DISTINCT``."""
    using = router.db_for_read(model)
    connection = connections[using]
    field = model._meta.get_field(field_name)
    if connection.vendor != "postgresql":
        values = (
            model._default_manager.using(using)
            .exclude(**{f"{field_name}__isnull": True})
            .order_by(field_name)
            .values_list(field_name, flat=True)
            .distinct()
        )
        return list(values)
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(field.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE found(value) AS ("
            f"(SELECT {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY {column} LIMIT 1)"
            f" UNION ALL SELECT (SELECT {column} FROM {table} WHERE {column} > found.value"
            f" ORDER BY {column} LIMIT 1) FROM found WHERE found.value IS NOT NULL)"
            f" SELECT value FROM found WHERE value IS NOT NULL"
        )
        return [field.to_python(row[0]) for row in cursor.fetchall()]


class _ChosenValuesFilter(admin.AllValuesFieldListFilter):
    """Django's filter by each value a column holds, offering the values :meth:`values_of`
    gives instead of the parent's choices, a lazy ``DISTINCT`` over the whole table that is
    then never run."""

    def __init__(
        self,
        field: models.Field,
        request: HttpRequest,
        params: dict[str, Any],
        model: type[models.Model],
        model_admin: admin.ModelAdmin,
        field_path: str,
    ) -> None:
        super().__init__(field, request, params, model, model_admin, field_path)
        self.lookup_choices = self.values_of(model, field_path)

    def values_of(self, model: type[models.Model], field_path: str) -> list[Any]:
        raise NotImplementedError


class IndexedValuesFilter(_ChosenValuesFilter):
    """The values a column holds, read by :func:`distinct_values` (the column must be
    indexed)."""

    def values_of(self, model: type[models.Model], field_path: str) -> list[Any]:
        return distinct_values(model, field_path)


def fixed_values_filter(values: Sequence[Any]) -> type[admin.AllValuesFieldListFilter]:
    """Django's filter by each value of a column, offering ``values`` as they are: for a
    column no index serves, whose own values would be a read of every row. A value not
    offered is still filtered on from the URL (``?<field>__exact=<value>``)."""

    class FixedValuesFilter(_ChosenValuesFilter):
        def values_of(self, model: type[models.Model], field_path: str) -> list[Any]:
            return list(values)

    return FixedValuesFilter
