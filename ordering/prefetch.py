"""Related rows a service already holds, handed to the ORM as if they had been prefetched.

A service that has just written an order, its lines and its first transition holds every row
an answer shows. Reading them back to serialize the answer would cost one query per relation
(four for an order) inside the write's transaction. Django's prefetch cache is where
``order.lines.all()`` looks first, so filling it with the objects in hand lets serializers
and templates render them with no query. The objects are the ones saved, so they hold what
the database holds (``tests/ordering/test_placing.py`` compares an answer with a re-read).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Model


def with_related(instance: Model, **related: Sequence[Model]) -> Model:
    """``instance`` with ``related`` (related name -> the complete list of its rows, in the
    relation's ordering) as its prefetched reverse relations; returns ``instance``."""
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, rows in related.items():
        queryset = getattr(instance, name).get_queryset()
        queryset._result_cache = list(rows)
        queryset._prefetch_done = True
        cache[name] = queryset
    return instance


# SQL of a reverse relation's read, per (model, relation, database), compiled once: the
# relation's rows of any one instance differ only in the instance's key, its one parameter
_RELATION_SQL: dict[tuple[type[Model], str, str], str] = {}


def read_related(instance: Model, *names: str) -> Model:
    """``instance`` with its reverse relations ``names`` read from the database and kept as
    prefetched (:func:`with_related`); returns ``instance``.

    What ``order.lines.all()`` would read, in the relation's ordering, but without building the
    query again for every instance: Django compiles a query afresh each time it runs, which
    cost more of a worker's CPU than running it (about 190 of 470 µs per relation, measured in
    one process; ``docs/benchmarks.md``). The text is compiled once per relation, the first
    time, and kept when its only parameter is the instance's key; the rows are read through
    ``raw()``, so the database's converters apply as for any query."""
    using = instance._state.db or "default"
    related: dict[str, list[Model]] = {}
    for name in names:
        manager = getattr(instance, name)
        key = (type(instance), name, using)
        sql = _RELATION_SQL.get(key)
        if sql is None:
            sql, params = manager.all().query.sql_with_params()
            if list(params) != [instance.pk]:
                related[name] = list(manager.all())  # a shape this cannot reuse: as Django reads
                continue
            _RELATION_SQL[key] = sql
        related[name] = list(manager.model._base_manager.db_manager(using).raw(sql, [instance.pk]))
    return with_related(instance, **related)
