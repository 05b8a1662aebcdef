"""Who works in a restaurant's dashboard: adding an existing user, changing a role, removing.

Every restaurant keeps at least one owner: a change that would leave none is refused, decided
under a lock on the tenant's owner memberships so two owners demoting each other at once cannot
both succeed.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from tenants.models import Membership, Tenant

Role = Membership.Role
LAST_OWNER = "A restaurant needs at least one owner."


class MemberError(Exception):
    """A refused change, with a message for the person who asked."""


def members_of(tenant: Tenant) -> list[Membership]:
    return list(
        Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    )


def not_addable(username: str) -> str:
    """The one answer for every account an owner may not add, whether or not it exists."""
    return (
        f"No account named {username!r} can be added here. Platform staff create accounts, "
        "and add people who already work for another restaurant."
    )


@transaction.atomic
def add_member(*, tenant: Tenant, username: str, role: str) -> Membership:
    """Give a role in ``tenant`` to an account of no restaurant yet (platform staff create
    accounts for a restaurant's owner to add).

    An owner may not add an account of another restaurant, nor a platform staff account:
    adding one answered differently from a name no account has, so any owner could learn
    which names the platform's other restaurants (or its staff) sign in with, and then hold
    them as members. Those are refused with the very words of an unknown name; staff add a
    person of several restaurants in the Django admin. The account's row is locked while its
    memberships are read, so two restaurants adding the same new account at once do not both
    succeed."""
    user = (
        get_user_model()
        .objects.select_for_update()
        .filter(username=username, is_active=True, is_staff=False, is_superuser=False)
        .first()
    )
    if user is None:
        raise MemberError(not_addable(username))
    memberships = Membership.objects.filter(user=user)
    if memberships.filter(tenant=tenant).exists():
        raise MemberError(f"{username} is already a member.")
    if memberships.exists():
        raise MemberError(not_addable(username))
    try:
        with transaction.atomic():
            return Membership.objects.create(tenant=tenant, user=user, role=role)
    except IntegrityError:
        raise MemberError(f"{username} is already a member.") from None


@transaction.atomic
def change_role(*, tenant: Tenant, membership_id: int, role: str) -> Membership:
    membership = _locked(tenant, membership_id)
    if membership.role == Role.OWNER and role != Role.OWNER:
        _keep_an_owner(tenant, leaving=membership)
    Membership.objects.filter(pk=membership.pk).update(role=role)
    membership.role = role
    return membership


@transaction.atomic
def remove_member(*, tenant: Tenant, membership_id: int) -> Membership:
    membership = _locked(tenant, membership_id)
    if membership.role == Role.OWNER:
        _keep_an_owner(tenant, leaving=membership)
    membership.delete()
    return membership


def lock_owners(tenant: Tenant) -> None:
    """Lock ``tenant``'s owner memberships until the caller's transaction ends, always in
    primary-key order (no deadlock between two changes): whoever checks "is another owner
    left?" after this, and writes in the same transaction, cannot be overtaken by another
    change doing the same."""
    list(
        Membership.objects.select_for_update()
        .filter(tenant=tenant, role=Role.OWNER)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _locked(tenant: Tenant, membership_id: int) -> Membership:
    # the owners first, so the owner count below cannot move under us
    lock_owners(tenant)
    membership = (
        Membership.objects.select_for_update()
        .select_related("user")
        .filter(tenant=tenant, pk=membership_id)
        .first()
    )
    if membership is None:
        raise Membership.DoesNotExist
    return membership


def is_last_owner(membership: Membership) -> bool:
    """Whether ``membership`` is its restaurant's only owner: a change that takes the role
    away from it is refused."""
    if membership.role != Role.OWNER:
        return False
    owners = Membership.objects.filter(tenant_id=membership.tenant_id, role=Role.OWNER)
    return not owners.exclude(pk=membership.pk).exists()


def _keep_an_owner(tenant: Tenant, *, leaving: Membership) -> None:
    if is_last_owner(leaving):
        raise MemberError(LAST_OWNER)
