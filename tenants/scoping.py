"""Tenant-scoped managers: the only way into tenant data is ``objects.for_tenant(tenant)``.

Every model that belongs to a tenant declares two managers::

    all_tenants = models.Manager()       # first: Django's default (admin, relations, migrations)
    objects = TenantManager()            # application code: objects.for_tenant(t)...

``Model.objects.filter(...)`` or ``Model.objects.get(...)`` raises :class:`UnscopedQueryError`, so
forgetting the tenant filter fails loudly in tests instead of leaking another merchant's rows.
Code that really means "across tenants" (staff admin, sweepers) says so by naming
``all_tenants``, which stands out in review.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class UnscopedQueryError(RuntimeError):
    """Tenant data was queried without naming the tenant."""


class TenantQuerySet(models.QuerySet):
    def for_tenant(self, tenant: Any) -> TenantQuerySet:
        return _with_tenant_in_hand(self.filter(tenant=tenant), tenant)


class TenantManager(models.Manager):
    """Manager whose every query must start with ``for_tenant``."""

    def get_queryset(self) -> TenantQuerySet:
        raise UnscopedQueryError(
            f"{self.model.__name__}.objects needs .for_tenant(tenant); "
            f"use {self.model.__name__}.all_tenants for a deliberate cross-tenant query"
        )

    def for_tenant(self, tenant: Any) -> TenantQuerySet:
        if tenant is None:
            raise UnscopedQueryError("for_tenant(None): a tenant is required")
        return TenantQuerySet(self.model, using=self._db).for_tenant(tenant)


def _with_tenant_in_hand(rows: TenantQuerySet, tenant: Any) -> TenantQuerySet:
    """``rows`` handing every row it reads the caller's ``tenant`` instance as ``row.tenant``.

    Every row such a query reads belongs to that tenant, so ``row.tenant`` would read again
    what the caller holds: one query more per row, e.g. when an order's move logs its
    transition under ``order.tenant``. Django fills a related manager's rows the same way
    (``QuerySet._known_related_objects``, which each clone of the query keeps)."""
    if isinstance(tenant, models.Model):
        field = rows.model._meta.get_field("tenant")
        rows._known_related_objects = {field: {tenant.pk: tenant}}
    return rows
