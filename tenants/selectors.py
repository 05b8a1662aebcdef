"""Reads about tenants and who belongs to them."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest

from tenants.models import Membership, Tenant
from tenants.session_values import change_value

SESSION_TENANT_KEY = "current_tenant_id"


def memberships_of(user: AbstractBaseUser) -> list[Membership]:
    return list(
        Membership.objects.filter(user=user, tenant__status=Tenant.Status.ACTIVE)
        .select_related("tenant")
        .order_by("tenant__slug")
    )


def current_membership(request: HttpRequest) -> Membership | None:
    """The membership the dashboard works in: the one chosen in the session, else the first.

    A user of several tenants switches with :func:`switch_tenant`; a stale choice (membership
    removed, tenant suspended) silently falls back to the first remaining membership.
    """
    if not request.user.is_authenticated:
        return None
    memberships = memberships_of(request.user)
    chosen = request.session.get(SESSION_TENANT_KEY)
    for membership in memberships:
        if membership.tenant_id == chosen:
            return membership
    return memberships[0] if memberships else None


def switch_tenant(request: HttpRequest, tenant_id: int) -> Membership | None:
    """Make ``tenant_id`` current if the user is a member of it; None otherwise."""
    for membership in memberships_of(request.user):
        if membership.tenant_id == tenant_id:
            # another tab's request must not write its older copy back over the choice
            change_value(request, SESSION_TENANT_KEY, lambda _: (tenant_id, None))
            return membership
    return None
