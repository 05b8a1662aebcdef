"""INSERT the rows of several models in one SQL statement: one round trip instead of one per model.

A new order is three INSERTs (the order, its lines, its first transition) whose values are all
known before the first is sent: the order's primary key is issued in Python
(:mod:`ordering.order_ids`), so nothing waits on another's ``RETURNING``. PostgreSQL runs
data-modifying CTEs of one statement together, so they go as

    WITH b0 AS (INSERT ... ), b1 AS (INSERT ... RETURNING id), ...
    SELECT 1, id FROM b1 UNION ALL ...

A :class:`Leading` statement may go first (``lead AS (INSERT ... RETURNING <one column>)``):
a row's field set to its :attr:`~Leading.placeholder` takes the value it returns (the day's
order number, from its counter's upsert), and every such field is set to that value afterwards.

Each INSERT is compiled by Django's own insert compiler (field conversion, ``auto_now_add``,
column names), so a model change needs no change here. Rows come back in ``VALUES`` order, the
same guarantee Django's ``bulk_create`` relies on to set primary keys. Other databases (the
embedded demo's SQLite) get one ``bulk_create`` per model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.expressions import RawSQL
from django.db.models.sql import InsertQuery

_LEAD = "lead"


@dataclass(frozen=True)
class Leading:
    """A data-modifying statement returning one row of one column, run first."""

    sql: str
    params: Sequence[object]
    placeholder: RawSQL = field(
        init=False, default_factory=lambda: RawSQL(f"(SELECT * FROM {_LEAD})", ())
    )


def insert_together(*batches: Sequence[Model], leading: Leading | None = None) -> Any:
    """INSERT every batch (a non-empty list of instances of one model) in one statement, in
    order; instances whose primary key the database assigns get it, and every instance is
    marked as saved. No ``save()`` signals are sent (none are connected to these models).
    Returns what ``leading`` returned (None without one)."""
    model = type(batches[0][0])
    using = router.db_for_write(model)
    connection = connections[using]
    if connection.vendor != "postgresql":
        # e.g. the embedded demo's SQLite, which has no data-modifying CTEs: one statement each
        value = None
        if leading is not None:
            with connection.cursor() as cursor:
                cursor.execute(leading.sql, list(leading.params))
                (value,) = cursor.fetchone()
            _fill(batches, leading, value)
        for batch in batches:
            type(batch[0])._base_manager.using(using).bulk_create(batch)
        return value
    parts: list[str] = []
    params: list[object] = []
    selects: list[str] = []
    if leading is not None:
        parts.append(f"{_LEAD} AS ({leading.sql})")
        params.extend(leading.params)
        selects.append(f"SELECT -1, * FROM {_LEAD}")
    for index, batch in enumerate(batches):
        sql, batch_params, returns_pk = _insert_sql(batch, using=using)
        parts.append(f"b{index} AS ({sql})")
        params.extend(batch_params)
        if returns_pk:
            selects.append(f"SELECT {index}, {_pk_column(batch, connection)} FROM b{index}")
    statement = "WITH " + ", ".join(parts) + " " + (" UNION ALL ".join(selects) or "SELECT 0, 0")
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        returned = cursor.fetchall() if selects else []
    pending = {index: list(batch) for index, batch in enumerate(batches)}
    value = None
    for index, pk in returned:
        if index < 0:
            value = pk
        else:
            pending[index].pop(0).pk = pk
    if leading is not None:
        _fill(batches, leading, value)
    for batch in batches:
        for instance in batch:
            instance._state.adding = False
            instance._state.db = using
    return value


def _fill(batches: Sequence[Sequence[Model]], leading: Leading, value: Any) -> None:
    """Every field set to ``leading``'s placeholder takes the value it returned."""
    for batch in batches:
        for instance in batch:
            for concrete in instance._meta.concrete_fields:
                if getattr(instance, concrete.attname) is leading.placeholder:
                    setattr(instance, concrete.attname, value)


def _insert_sql(batch: Sequence[Model], *, using: str) -> tuple[str, list[object], bool]:
    """One model's ``INSERT ... VALUES (...), ...`` as Django would send it, with ``RETURNING``
    the primary key when the database assigns it."""
    model = type(batch[0])
    opts = model._meta
    returns_pk = batch[0].pk is None
    fields = [f for f in opts.concrete_fields if not (returns_pk and f is opts.pk)]
    query = InsertQuery(model)
    query.insert_values(fields, batch)
    compiler = query.get_compiler(using=using)
    if returns_pk:
        compiler.returning_fields = [opts.pk]
    [(sql, params)] = compiler.as_sql()
    return sql, list(params), returns_pk


def _pk_column(batch: Sequence[Model], connection: BaseDatabaseWrapper) -> str:
    return connection.ops.quote_name(type(batch[0])._meta.pk.column)
