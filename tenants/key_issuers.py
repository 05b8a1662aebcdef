"""Secret keys that someone who has left still knows.

A key belongs to the restaurant, not to the member who issued it: revoking it when that member
leaves would stop the restaurant's own server, so nothing does that by itself. But the member
saw the full key once, on the API keys page, and a secret key still works for whoever holds it.
So the owners left are told: when they remove a member, or lower a member's role below the one
that reaches API keys, how many live secret keys that member issued; and the keys page marks
each live secret key whose issuer no longer reaches the page, or whose account was deleted.
Publishable keys are not counted: they ship inside the diner app, public already.
"""

from __future__ import annotations

from django.db.models import QuerySet

from tenants.models import ApiClient, Membership, Tenant
from tenants.permissions import Area, role_reaches


def live_secret_keys(tenant: Tenant) -> QuerySet[ApiClient]:
    return ApiClient.objects.filter(
        tenant=tenant, kind=ApiClient.Kind.MERCHANT, revoked_at__isnull=True
    )


def secret_keys_known_by(*, tenant: Tenant, user_id: int) -> int:
    """How many of ``tenant``'s live secret keys ``user_id`` issued (and so saw in full)."""
    return live_secret_keys(tenant).filter(issued_by_id=user_id).count()


def known_by_someone_who_left(client: ApiClient, left: set[int]) -> bool:
    """Whether ``client`` is a live secret key whose issuer has left: one of ``left``
    (:func:`issuers_who_left`), or an account since deleted."""
    return (
        not client.is_revoked
        and client.kind == ApiClient.Kind.MERCHANT
        and (client.issuer_gone or client.issued_by_id in left)
    )


def issuers_who_left(tenant: Tenant) -> set[int]:
    """The issuers of ``tenant``'s live secret keys who no longer reach its API keys page
    (removed, or their role lowered)."""
    issuers = set(
        live_secret_keys(tenant)
        .filter(issued_by__isnull=False)
        .values_list("issued_by_id", flat=True)
    )
    if not issuers:
        return set()
    still_there = {
        user_id
        for user_id, role in Membership.objects.filter(
            tenant=tenant, user_id__in=issuers
        ).values_list("user_id", "role")
        if role_reaches(role, Area.API_KEYS)
    }
    return issuers - still_there


def left_with_keys_message(*, tenant: Tenant, user_id: int, name: str) -> str | None:
    """What the owners are told after ``name`` stopped reaching API keys, if they issued any
    live secret key; None if not."""
    known = secret_keys_known_by(tenant=tenant, user_id=user_id)
    if not known:
        return None
    return (
        f"{known} active secret key(s) {name} issued still work, and {name} saw each in full. "
        f"Revoke them on the API keys page if {name} should no longer hold them."
    )
