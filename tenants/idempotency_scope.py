"""Tells the idempotency engine who is calling: the tenant and the principal within it.

The engine only sees opaque strings, so the same key sent by another tenant or principal lands
in another scope and can never replay someone else's response. The API's principal is the real
one (``ApiPrincipal.principal_id``): a session's diner, or a merchant's key; never a header.
"""

from __future__ import annotations

from functools import lru_cache

from django.http import HttpRequest

from tenants.models import Tenant
from tenants.principals import ApiPrincipal


def resolve(request: HttpRequest) -> tuple[str, str] | None:
    user = getattr(request, "user", None)
    if isinstance(user, ApiPrincipal):
        return str(user.tenant.pk), user.principal_id
    membership = getattr(request, "membership", None)
    if membership is not None:
        return str(membership.tenant_id), f"user:{membership.user_id}"
    return None


def may_pin_script_version(request: HttpRequest) -> bool:
    """``X-Lua-Version`` is honoured only for test API clients and staff users."""
    user = getattr(request, "user", None)
    if isinstance(user, ApiPrincipal):
        return user.client.is_test
    return bool(getattr(user, "is_staff", False))


@lru_cache(maxsize=4096)
def tenant_region(tenant_key: str) -> str | None:
    """A tenant's region, for region-targeted canaries (regions rarely change; a process
    restart or the cache's size bound refreshes it)."""
    return Tenant.objects.filter(pk=tenant_key).values_list("region", flat=True).first()


def tenant_labels(tenant_keys: list[str]) -> dict[str, str]:
    """Tenant names by the engine's tenant keys, for the staff admin's lists."""
    pks = [int(key) for key in tenant_keys if key.isdigit()]
    return {
        str(pk): name for pk, name in Tenant.objects.filter(pk__in=pks).values_list("pk", "name")
    }
