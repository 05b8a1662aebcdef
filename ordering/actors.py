"""Who made a move, in words a person understands: one display function for every screen.

Status logs record their actor as a short machine string: ``kind:value`` parts joined by ``/``
(``api:<key prefix>/diner:d-4``, ``merchant:alice``, ``staff:bob``, ``provider:simulated``,
``saga:cancel``). :func:`describe_actors` turns them into "Diner d-4 (via Demo diner app)",
"alice (dashboard)", "Payment provider (simulated)"… It reads the parts one by one rather than
matching whole formats, so an actor string with parts it does not know (a new kind of caller)
still reads as "<kind> <value>" instead of breaking the page.

API key prefixes are looked up among the tenant's own keys only: another tenant's key name is
never shown. Nor is a platform staff member's name, except to staff (the admin): a restaurant
reads "Platform staff" (and an offboarding's cancels, ``offboarding:staff:bob``, "Platform
staff (closing the restaurant's account)"). A staff member's sign-in name is half of what
opens the platform's admin, and restaurants are never told it (``tenants.members`` turns staff
accounts away without saying so).

A diner's copy of their data (:mod:`ordering.privacy.diner_export`) names no one at all: a
restaurant member's sign-in name is that member's personal data, not the diner's, and the API
never shows a diner who moved an order. There a member's move reads "Restaurant staff
(dashboard)".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tenants.models import ApiClient, Tenant

# How each known part reads; the diner (the person the move was made for) comes first.
PART_LABELS: dict[str, Callable[[str], str]] = {
    "diner": lambda value: f"Diner {value}",
    "merchant": lambda value: f"{value} (dashboard)",
    "staff": lambda value: f"{value} (platform staff)",
    "provider": lambda value: f"Payment provider ({value})",
    "saga": lambda value: "Automatic refund" if value == "cancel" else f"Automatic {value}",
}
SUBJECT_KINDS = ("diner",)
API_KIND = "api"
STAFF_KIND = "staff"
STAFF_UNNAMED = "Platform staff"
MEMBER_KIND = "merchant"
MEMBER_UNNAMED = "Restaurant staff (dashboard)"
# An offboarding's own moves (cancelling paid orders) are ``offboarding:<who asked>``, and who
# asked is platform staff (``staff:<username>``) or an operator (``cli:<user>``, a ``--by``
# name): named to staff only, like a staff member's own moves.
OFFBOARDING_KIND = "offboarding"
OFFBOARDING_UNNAMED = "Platform staff (closing the restaurant's account)"


def parts_of(actor: str) -> list[tuple[str, str]]:
    """``api:ab12/diner:d-4`` → ``[("api", "ab12"), ("diner", "d-4")]``; a part without a
    colon is a kind without a value."""
    return [tuple(part.partition(":")[::2]) for part in actor.split("/") if part]  # type: ignore[misc]


def describe_actors(
    tenant: Tenant,
    actors: Iterable[str],
    *,
    staff_names: bool = False,
    member_names: bool = True,
) -> dict[str, str]:
    """Each actor string → how it reads, resolving the tenant's API key names in one query;
    platform staff by name only when ``staff_names`` (the admin), the restaurant's members by
    name unless ``member_names`` is off (a diner's copy)."""
    actors = set(actors)
    prefixes = {value for a in actors for kind, value in parts_of(a) if kind == API_KIND}
    key_names = dict(
        ApiClient.objects.filter(tenant=tenant, prefix__in=prefixes).values_list("prefix", "name")
    )
    return {
        actor: _describe(actor, key_names, staff_names=staff_names, member_names=member_names)
        for actor in actors
    }


def without_staff_names(actor: str) -> str:
    """The actor string as a restaurant's API key reads it: a platform staff member's part
    keeps its kind and loses the name (``staff:bob`` → ``staff``), and so does an
    offboarding's, whose value is who asked (``offboarding:staff:bob`` → ``offboarding``)."""
    unnamed = (STAFF_KIND, OFFBOARDING_KIND)
    return "/".join(
        kind if (kind := part.partition(":")[0]) in unnamed else part for part in actor.split("/")
    )


def shown_requester(requested_by: str) -> str:
    """Who asked for an erasure, as the restaurant's Privacy page says it: one of its owners by
    name; anyone else (platform staff in the admin, an operator's command, a name given with
    ``--by``) as platform staff."""
    kind, _, name = requested_by.partition(":")
    return f"{name} (owner)" if kind == "owner" and name else STAFF_UNNAMED


def _describe(
    actor: str, key_names: dict[str, str], *, staff_names: bool, member_names: bool
) -> str:
    subjects, channels = [], []
    for kind, value in parts_of(actor):
        if kind == API_KIND:
            channels.append(key_names.get(value, f"API key {value}"))
        elif kind == STAFF_KIND and not staff_names:
            channels.append(STAFF_UNNAMED)
        elif kind == MEMBER_KIND and not member_names:
            channels.append(MEMBER_UNNAMED)
        elif kind == OFFBOARDING_KIND:
            channels.append(f"Offboarding ({value})" if staff_names else OFFBOARDING_UNNAMED)
        elif kind in PART_LABELS:
            (subjects if kind in SUBJECT_KINDS else channels).append(PART_LABELS[kind](value))
        else:
            channels.append(f"{kind} {value}".strip())
    if subjects and channels:
        return f"{', '.join(subjects)} (via {', '.join(channels)})"
    return ", ".join(subjects or channels) or actor
