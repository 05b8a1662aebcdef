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
