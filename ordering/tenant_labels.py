"""Tenant names for the engine's admin lists (``IDEMPOTENCY["TENANT_LABELS"]``), restaurants
that left included.

A capture reported after a restaurant's offboarding is audited under its id
(docs/payments-and-saga.md), the tenant row gone: :func:`tenants.idempotency_scope.tenant_labels`
names only tenants that exist, so the audits list and its tenant filter showed a bare number that
named nothing staff could look up. A key no tenant holds is named by the slug its offboarding
kept, as the offboarding jobs and the departed payments show it: ``<slug> (offboarded)``.
"""

from __future__ import annotations

from ordering.models import TenantOffboarding
from tenants.idempotency_scope import tenant_labels as living_tenant_labels


def tenant_labels(tenant_keys: list[str]) -> dict[str, str]:
    labels = living_tenant_labels(tenant_keys)
    gone = {int(key) for key in tenant_keys if key.isdigit() and key not in labels}
    if gone:
        for ref, slug in TenantOffboarding.objects.filter(tenant_ref__in=gone).values_list(
            "tenant_ref", "tenant_slug"
        ):
            labels[str(ref)] = f"{slug} (offboarded)"
    return labels
