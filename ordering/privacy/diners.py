"""Erasing a diner: what the platform keeps about one diner of one tenant, removed or made
anonymous on request.

Orders are kept for the restaurant's accounts, but they no longer say whose they were: the
diner id becomes a pseudonym (``erased-<random>``, the same for all of that diner's orders, so
the books still group them), the free-text note is emptied, and the order forgets the
idempotency key it was placed with. Everything else goes: the diner's sessions, its stored
idempotency replies (PostgreSQL, Redis, every process's local cache), the replies of other
callers that show the diner's id (a merchant accepting the order), its duplicate-hit audits,
its pre-issued tokens and its rate counters, on whatever Redis topology the site runs.

An :class:`~ordering.models.DinerErasure` row records who asked, when and how much went, with
the diner id only as an HMAC under the site's ``SECRET_KEY`` (:func:`diner_hash`). Erasing the
same diner again is safe: it finds nothing more to remove and logs that it found nothing.
"""

from __future__ import annotations

import json
import secrets
import time
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Replace
from django.utils.crypto import salted_hmac

from idempotency import erasure
from ordering.models import DinerErasure, Order, OrderTransition, OutboxEvent
from tenants.models import DinerSession, Tenant
from tenants.session_state import forget

_HASH_SALT = "ordering.privacy.diner"
PSEUDONYM_PREFIX = "erased-"


def diner_hash(diner_id: str) -> str:
    """The keyed hash an erasure log keeps instead of the diner id (look-ups hash the query)."""
    return salted_hmac(_HASH_SALT, diner_id, algorithm="sha256").hexdigest()


def erase_diner(
    *, tenant: Tenant, diner_id: str, requested_by: str, batch: int = 500
) -> DinerErasure:
    """Erase ``diner_id`` of ``tenant`` everywhere; returns the log row written.

    Sessions end first, then the call waits out ``DINER_SESSION_STATE_CACHE_SECONDS`` (the
    longest any process still honours a session it has cached), so no new order of this diner
    can start once the orders are anonymised. Needs every Redis node reachable: a Redis error
    propagates (and nothing is logged), and running the erasure again finishes it.
    """
    sessions = _end_sessions(tenant=tenant, diner_id=diner_id)
    time.sleep(settings.DINER_SESSION_STATE_CACHE_SECONDS)
    pseudonym = f"{PSEUDONYM_PREFIX}{secrets.token_hex(8)}"
    orders = _anonymise_orders(tenant=tenant, diner_id=diner_id, pseudonym=pseudonym)
    forgotten = erasure.forget_principal(
        tenant_key=str(tenant.pk),
        principal=f"diner:{diner_id}",
        also_records_containing=json.dumps(diner_id).encode(),
        batch=batch,
    )
    return DinerErasure.objects.create(
        tenant=tenant,
        diner_hash=diner_hash(diner_id),
        pseudonym=pseudonym,
        requested_by=requested_by[:200],
        counts={"sessions": sessions, "orders": orders, **forgotten.as_dict()},
    )


def _end_sessions(*, tenant: Tenant, diner_id: str) -> int:
    """Delete the diner's sessions (a deleted session opens nothing, like a revoked one)."""
    ids: list[UUID] = list(
        DinerSession.objects.filter(tenant=tenant, diner_id=diner_id).values_list("pk", flat=True)
    )
    deleted = DinerSession.objects.filter(pk__in=ids).delete()[0]
    for session_id in ids:
        forget(session_id)
    return deleted


def _anonymise_orders(*, tenant: Tenant, diner_id: str, pseudonym: str) -> int:
    """Give the diner's orders the pseudonym and drop their note and contact details, in one
    transaction: the orders, their transition log's actor (``api:<key>/diner:<id>``) and the
    outbox events that copied it."""
    with transaction.atomic():
        orders = Order.all_tenants.filter(tenant=tenant, diner_id=diner_id)
        order_ids = list(orders.values_list("pk", flat=True))
        count = orders.update(
            diner_id=pseudonym,
            note="",
            contact_phone="",
            delivery_address="",
            idempotency_key=None,
        )
        old, new = f"/diner:{diner_id}", f"/diner:{pseudonym}"
        OrderTransition.all_tenants.filter(tenant=tenant, actor__endswith=old).update(
            actor=Replace(F("actor"), Value(old), Value(new))
        )
        for event in OutboxEvent.all_tenants.filter(tenant=tenant, order_id__in=order_ids):
            actor = str(event.payload.get("actor", ""))
            if actor.endswith(old):
                event.payload["actor"] = actor.removesuffix(old) + new
                event.save(update_fields=["payload"])
    return count
