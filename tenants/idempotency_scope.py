"""Tells the idempotency engine who is calling: the tenant and the principal within it.

The engine only sees opaque strings, so the same key sent by another tenant, API client or
diner lands in another scope and can never replay someone else's response.
"""

from __future__ import annotations

from django.http import HttpRequest

from tenants.authentication import ApiPrincipal


def resolve(request: HttpRequest) -> tuple[str, str] | None:
    user = getattr(request, "user", None)
    if isinstance(user, ApiPrincipal):
        return str(user.tenant.pk), user.principal_id
    membership = getattr(request, "membership", None)
    if membership is not None:
        return str(membership.tenant_id), f"user:{membership.user_id}"
    return None
