"""The test project's SCOPE_RESOLVER: tenant and principal from headers.

Only a test may trust headers for this: a real resolver reads the authenticated caller (see
:func:`idempotency.tests.testapp.quickstart.scope`), never something a client can set.
"""

from __future__ import annotations

from django.http import HttpRequest


def from_headers(request: HttpRequest) -> tuple[str, str] | None:
    tenant = request.headers.get("X-Tenant")
    if not tenant:
        return None
    return tenant, request.headers.get("X-Principal", "anonymous")


# REDACT_FOR_TENANT of the test project: the paths a test gives a tenant of its own.
tenant_redaction: dict[str, tuple[str, ...]] = {}


def redaction_for(tenant: str) -> tuple[str, ...]:
    return tenant_redaction.get(tenant, ())


# AUDIT_RETENTION_OVERRIDES of the test project: days a test gives tenants of its own.
tenant_audit_days: dict[str, int] = {}


def audit_retention_overrides() -> dict[str, int]:
    return dict(tenant_audit_days)


# What :func:`answering` answers, for tests of a resolver at fault.
resolver_answer: dict[str, object] = {"value": None}


def answering(request: HttpRequest) -> object:
    return resolver_answer["value"]


def half_for_guests(request: HttpRequest) -> float | None:
    """A TOKEN_QUOTA_SHARE hook: principals named ``guest-…`` may fill half of the quota."""
    return 0.5 if request.headers.get("X-Principal", "").startswith("guest-") else None
