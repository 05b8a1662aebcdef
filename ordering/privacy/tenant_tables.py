"""Which tables hold a tenant's rows, how to find them, and in which order they can go.

Found, not listed: every model with a foreign key to :class:`~tenants.models.Tenant` is the
tenant's, so a table added later is offboarded (and checked by the tests) without anyone
remembering to add it here. A row also belongs to the tenant through a foreign key to another
of its tables when its own tenant column is empty (a dead letter of one of its orders).
The engine's tables know tenants by an opaque string; every engine model with a
``tenant_key`` field is the tenant's too (:func:`engine_tables`).

Many of these foreign keys are ``PROTECT`` (orders outlive nothing by accident), so rows are
deleted referrers first: :func:`deletion_order` puts each table before every table it points
to.
"""

from __future__ import annotations

from graphlib import TopologicalSorter

from django.apps import apps
from django.db.models import ForeignKey, Model, Q

from tenants.models import Tenant
from tenants.write_fence import tenant_tables


def _foreign_keys(model: type[Model]) -> list[ForeignKey]:
    return [f for f in model._meta.concrete_fields if isinstance(f, ForeignKey)]


def engine_tables() -> list[type[Model]]:
    """The idempotency engine's models that key rows by tenant (``tenant_key``)."""
    return [
        model
        for model in apps.get_app_config("idempotency").get_models()
        if any(f.name == "tenant_key" for f in model._meta.concrete_fields)
    ]


def deletion_order() -> list[type[Model]]:
    """The tenant's tables, each before every other tenant table it points to."""
    tables = tenant_tables()
    after: dict[type[Model], set[type[Model]]] = {model: set() for model in tables}
    for model in tables:
        for fk in _foreign_keys(model):
            target = fk.related_model
            if target in after and target is not model:
                after[target].add(model)  # ``target`` goes after ``model``
    return list(TopologicalSorter(after).static_order())


def rows_of(model: type[Model], tenant_id: int) -> Q:
    """The filter of ``model``'s rows that belong to the tenant: its own tenant column, or a
    foreign key to a row of another tenant table."""
    condition = Q()
    for fk in _foreign_keys(model):
        if fk.related_model is Tenant:
            condition |= Q(**{f"{fk.name}_id": tenant_id})
    for fk in _foreign_keys(model):
        target = fk.related_model
        if target is model or target is Tenant or not isinstance(target, type):
            continue
        for target_fk in _foreign_keys(target):
            if target_fk.related_model is Tenant:
                condition |= Q(**{f"{fk.name}__{target_fk.name}_id": tenant_id})
    return condition
