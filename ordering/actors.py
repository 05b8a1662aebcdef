"""Who made a move, in words a person understands: one display function for every screen.

Status logs record their actor as a short machine string: ``kind:value`` parts joined by ``/``
(``api:<key prefix>/diner:d-4``, ``merchant:alice``, ``staff:bob``, ``provider:simulated``,
``saga:cancel``). :func:`describe_actors` turns them into "Diner d-4 (via Demo diner app)",
"alice (dashboard)", "Payment provider (simulated)"… It reads the parts one by one rather than
matching whole formats, so an actor string with parts it does not know (a new kind of caller)
still reads as "<kind> <value>" instead of breaking the page.

API key prefixes are looked up among the tenant's own keys only: another tenant's key name is
never shown.
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


def parts_of(actor: str) -> list[tuple[str, str]]:
    """``api:ab12/diner:d-4`` → ``[("api", "ab12"), ("diner", "d-4")]``; a part without a
    colon is a kind without a value."""
    return [tuple(part.partition(":")[::2]) for part in actor.split("/") if part]  # type: ignore[misc]


def describe_actors(tenant: Tenant, actors: Iterable[str]) -> dict[str, str]:
    """Each actor string → how it reads, resolving the tenant's API key names in one query."""
    actors = set(actors)
    prefixes = {value for a in actors for kind, value in parts_of(a) if kind == API_KIND}
    key_names = dict(
        ApiClient.objects.filter(tenant=tenant, prefix__in=prefixes).values_list("prefix", "name")
    )
    return {actor: _describe(actor, key_names) for actor in actors}


def _describe(actor: str, key_names: dict[str, str]) -> str:
    subjects, channels = [], []
    for kind, value in parts_of(actor):
        if kind == API_KIND:
            channels.append(key_names.get(value, f"API key {value}"))
        elif kind in PART_LABELS:
            (subjects if kind in SUBJECT_KINDS else channels).append(PART_LABELS[kind](value))
        else:
            channels.append(f"{kind} {value}".strip())
    if subjects and channels:
        return f"{', '.join(subjects)} (via {', '.join(channels)})"
    return ", ".join(subjects or channels) or actor
