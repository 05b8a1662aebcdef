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

Each INSERT is compiled by Django's own insert compiler (column names, placeholders,
``RETURNING``), so a model change needs no change here. The text depends only on the batch's
shape (model, database, number of rows, whether the key comes back, the SQL of any expression
among the values), so a process compiles each shape once and keeps it: compiling quoted every
column again and took about a tenth of an order's CPU. The values are converted for every
statement exactly as the compiler does (``pre_save``, ``auto_now_add`` included, then
``get_db_prep_save``). Rows come back in ``VALUES`` order, the same guarantee Django's
``bulk_create`` relies on to set primary keys. Other databases (the embedded demo's SQLite) get
one ``bulk_create`` per model.
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
from django.db.models.sql.compiler import SQLInsertCompiler

_LEAD = "lead"
# compiled INSERT text per batch shape, with how its values are laid out (see _layout); a shape
# is a model, a row count and an expression's SQL, so a process sees a few dozen; past the
# bound nothing is added
_SQL_BY_SHAPE: dict[tuple[Any, ...], tuple[str, str]] = {}
_MAX_SHAPES = 512


@dataclass(frozen=True)
class Leading:
    """A statement returning one row of one column, run first (a data-modifying one, such as
    the day's order-number upsert, or a plain read, such as a count)."""

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
    the primary key when the database assigns it: the shape's text compiled once per process
    (Django's compiler), the values converted for this batch."""
    model = type(batch[0])
    opts = model._meta
    returns_pk = batch[0].pk is None
    fields = [f for f in opts.concrete_fields if not (returns_pk and f is opts.pk)]
    if any(getattr(f, "get_placeholder", None) is not None for f in fields):
        # a field that writes its own placeholder (e.g. a geometry): compiled every time
        sql, params = _compiled(batch, fields, using=using, returns_pk=returns_pk)
        return sql, params, returns_pk
    connection = connections[using]
    compiler: SQLInsertCompiler | None = None
    expressions: list[str] = []
    params = []
    for instance in batch:
        for f in fields:
            value = f.pre_save(instance, add=True)
            if not hasattr(value, "resolve_expression"):
                prepared = f.get_db_prep_save(value, connection=connection)
            else:
                compiler = compiler or _compiler(batch, fields, using=using, returns_pk=returns_pk)
                prepared = compiler.prepare_value(f, value)
            if hasattr(prepared, "as_sql"):
                compiler = compiler or _compiler(batch, fields, using=using, returns_pk=returns_pk)
                expression_sql, expression_params = compiler.compile(prepared)
                expressions.append(expression_sql)
                params.extend(expression_params)
            else:
                params.append(prepared)
    shape = (model, using, returns_pk, len(batch), tuple(expressions))
    known = _SQL_BY_SHAPE.get(shape)
    if known is None:
        # the shape's first batch: Django compiles it (converting the values again, so its
        # own parameters are the ones sent, matching what pre_save set on the instances)
        sql, compiled_params = _compiled(batch, fields, using=using, returns_pk=returns_pk)
        layout = _layout(compiled_params, params, rows=len(batch), columns=len(fields))
        if layout is not None and len(_SQL_BY_SHAPE) < _MAX_SHAPES:
            _SQL_BY_SHAPE[shape] = (sql, layout)
        return sql, compiled_params, returns_pk
    sql, layout = known
    if layout == "columns":
        params = [params[column :: len(fields)] for column in range(len(fields))]
    return sql, params, returns_pk


def _layout(compiled: list[object], values: list[object], *, rows: int, columns: int) -> str | None:
    """How the compiler laid out a batch's values: ``rows`` (each row's values in field
    order: ``VALUES (...), (...)``), ``columns`` (one array per column: PostgreSQL's
    ``UNNEST`` form, which Django uses for several rows of plain values), or None when it is
    neither (the shape is then compiled every time)."""
    if len(compiled) == len(values):
        return "rows"
    by_column = len(values) == rows * columns and len(compiled) == columns
    if by_column and all(isinstance(c, list) and len(c) == rows for c in compiled):
        return "columns"
    return None


def _compiler(
    batch: Sequence[Model], fields: list[Any], *, using: str, returns_pk: bool
) -> SQLInsertCompiler:
    query = InsertQuery(type(batch[0]))
    query.insert_values(fields, batch)
    compiler = query.get_compiler(using=using)
    if returns_pk:
        compiler.returning_fields = [type(batch[0])._meta.pk]
    return compiler


def _compiled(
    batch: Sequence[Model], fields: list[Any], *, using: str, returns_pk: bool
) -> tuple[str, list[object]]:
    [(sql, params)] = _compiler(batch, fields, using=using, returns_pk=returns_pk).as_sql()
    return sql, list(params)


def _pk_column(batch: Sequence[Model], connection: BaseDatabaseWrapper) -> str:
    return connection.ops.quote_name(type(batch[0])._meta.pk.column)
