"""INSERT the rows of several models in one SQL statement: one round trip instead of one per model.

A new order is three INSERTs (the order, its lines, its first transition) whose values are all
known before the first is sent: the order's primary key is issued in Python
(:mod:`ordering.order_ids`), so nothing waits on another's ``RETURNING``. PostgreSQL runs
data-modifying CTEs of one statement together, so they go as

    WITH b0 AS (INSERT ... ), b1 AS (INSERT ... RETURNING id), ...
    SELECT 1, id FROM b1 UNION ALL ...

Each INSERT is compiled by Django's own insert compiler (field conversion, ``auto_now_add``,
column names), so a model change needs no change here. Rows come back in ``VALUES`` order, the
same guarantee Django's ``bulk_create`` relies on to set primary keys. Other databases (the
embedded demo's SQLite) get one ``bulk_create`` per model.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.sql import InsertQuery


def insert_together(*batches: Sequence[Model]) -> None:
    """INSERT every batch (a non-empty list of instances of one model) in one statement, in
    order; instances whose primary key the database assigns get it, and every instance is
    marked as saved. No ``save()`` signals are sent (none are connected to these models)."""
    model = type(batches[0][0])
    using = router.db_for_write(model)
    connection = connections[using]
    if connection.vendor != "postgresql":
        # e.g. the embedded demo's SQLite, which has no data-modifying CTEs: one INSERT each
        for batch in batches:
            type(batch[0])._base_manager.using(using).bulk_create(batch)
        return
    parts: list[str] = []
    params: list[object] = []
    selects: list[str] = []
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
    for index, pk in returned:
        pending[index].pop(0).pk = pk
    for batch in batches:
        for instance in batch:
            instance._state.adding = False
            instance._state.db = using


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
