"""A tenant's bound on rows of one kind (live API keys, dishes, active coupons), held under
concurrency.

Counting before inserting lets two creates racing for the last place each see room. The
tenant's row is locked first (``FOR NO KEY UPDATE``, which the foreign keys of orders and
other rows pointing at the tenant do not wait for) until the caller's transaction ends, so the
creates of one tenant count one after the other; the count reads at most ``limit`` rows.
"""

from __future__ import annotations

from django.db.models import QuerySet

from tenants.models import Tenant


def has_room(tenant: Tenant, rows: QuerySet, limit: int) -> bool:
    """Whether ``rows`` (``tenant``'s) hold fewer than ``limit``, with the tenant's row locked
    for the rest of the caller's transaction (which must be open)."""
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).values_list("pk").get()
    return rows[:limit].count() < limit
