"""Erasing a diner: what the platform keeps about one diner of one tenant, removed or made
anonymous on request.

Orders are kept for the restaurant's accounts, but they no longer say whose they were: the
diner id becomes a pseudonym (``erased-<16 hex>``, :func:`pseudonym_for`, the same for all of
that diner's orders, also across a rotation of ``SECRET_KEY``, so the books still group
them), the free-text note is emptied, and the order forgets the idempotency key it was
placed with. Everything else goes: the diner's sessions, its stored idempotency replies
(PostgreSQL, Redis, every process's local cache), the replies of other callers that show the
diner (a merchant accepting the order), its duplicate-hit audits, its pre-issued tokens and
its rate counters, on whatever Redis topology the site runs.

An :class:`~ordering.models.DinerErasure` row records who asked, when and how much went, with
the diner id only as an HMAC under the site's ``SECRET_KEY`` (:func:`diner_hash`). Erasing the
same diner again is safe: it finds nothing more to remove and logs that it found nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Replace
from django.utils.crypto import salted_hmac

from idempotency import erasure
from ordering.models import DinerErasure, Order, OrderTransition, OutboxEvent
from tenants.diner_sessions import DINER_ID_RE, ERASED_PREFIX, GUEST_PREFIX
from tenants.models import DinerSession, Tenant
from tenants.session_state import forget

_HASH_SALT = "ordering.privacy.diner"
_PSEUDONYM_SALT = "ordering.privacy.pseudonym"
PSEUDONYM_PREFIX = ERASED_PREFIX  # reserved: no session can be opened for such a diner id


# What a person who asked for an erasure is told when a Redis node did not answer: the
# erasure of that diner raised half-way (not logged), and running it again finishes it.
ERASURE_UNFINISHED = (
    "The erasure did not finish: a Redis node did not answer. Submit it again once every "
    "node answers, and it finishes what is left."
)


def diner_hash(diner_id: str, *, secret: str | None = None) -> str:
    """The keyed hash an erasure log keeps instead of the diner id (look-ups hash the query),
    under ``SECRET_KEY`` unless another ``secret`` is given."""
    return salted_hmac(_HASH_SALT, diner_id, secret=secret, algorithm="sha256").hexdigest()


def diner_hashes(diner_id: str) -> list[str]:
    """:func:`diner_hash` under ``SECRET_KEY`` and under each key of ``SECRET_KEY_FALLBACKS``:
    what the log's rows of this diner can hold while a rotation of the site's key is under
    way (README, "Run it in production")."""
    fallbacks = [diner_hash(diner_id, secret=key) for key in settings.SECRET_KEY_FALLBACKS]
    return [diner_hash(diner_id), *fallbacks]


class NotADinerId(ValueError):
    """No diner can have this id (sessions only carry ids of ``DINER_ID_RE``, and never one
    of the reserved pseudonym prefix)."""


class TenantLeaving(ValueError):
    """The diner's restaurant is being offboarded: its rows are fenced (an erasure would stop
    half-way, its sessions ended and its orders not), and its offboarding deletes them all."""


def check_erasable(tenant: Tenant) -> None:
    """Raise :class:`TenantLeaving` for a restaurant being offboarded."""
    if tenant.status == Tenant.Status.OFFBOARDING:
        raise TenantLeaving(
            f"{tenant.slug} is being offboarded: its offboarding deletes every row of its "
            "diners (they are in its archive), and nothing of it can be written meanwhile"
        )


def check_diner_id(diner_id: str) -> None:
    """Raise :class:`NotADinerId` for an id no diner can have. A pseudonym is one: erasing it
    would rename the erased diner's orders to a pseudonym of the pseudonym, and a later
    erasure of the diner (an order that was in flight) would put their orders under two."""
    if not DINER_ID_RE.fullmatch(diner_id):
        raise NotADinerId(f"{diner_id!r} is not a diner id (1-64 of A-Za-z0-9_.:@-)")
    if diner_id.startswith(PSEUDONYM_PREFIX):
        raise NotADinerId(
            f"{diner_id!r} is the pseudonym of a diner erased already, not a diner id "
            "(erase the diner by the id their app or backend uses)"
        )


def erase_diner(
    *, tenant: Tenant, diner_id: str, requested_by: str, batch: int = 500
) -> DinerErasure:
    """Erase ``diner_id`` of ``tenant`` everywhere; returns the log row written.

    Sessions end first, then the call waits out ``DINER_SESSION_STATE_CACHE_SECONDS`` (the
    longest any process still honours a session it has cached), so no new order of this diner
    can start once the orders are anonymised. The settings keep that wait within half of
    ``GUNICORN_TIMEOUT``, so a web request doing it is not killed half-way. Needs every Redis
    node reachable: a Redis error propagates (and nothing is logged), and running the erasure
    again finishes it.

    Another caller's stored reply goes when it *shows* the diner: the order's ``diner_id``
    member or a transition's actor (``…/diner:<id>``), matched as whole JSON strings, never
    the id as part of other text or as another field's value (a diner called ``card`` is not
    every order paid by card). Every erasure of the diner gives the same pseudonym, so an order
    placed in between joins the others under one name.
    """
    [log] = erase_diners(diners=[(tenant, diner_id)], requested_by=requested_by, batch=batch)
    return log


def erase_diners(
    *, diners: Sequence[tuple[Tenant, str]], requested_by: str, batch: int = 500
) -> list[DinerErasure]:
    """Erase each ``(tenant, diner id)`` as :func:`erase_diner` does, waiting out the cached
    sessions once for all of them: every diner's sessions end first, then one wait, then each
    is erased (staff erasing forty diners at once wait one second, not forty)."""
    for tenant, diner_id in diners:
        check_diner_id(diner_id)
        check_erasable(tenant)
    sessions = [_end_sessions(tenant=tenant, diner_id=diner_id) for tenant, diner_id in diners]
    time.sleep(settings.DINER_SESSION_STATE_CACHE_SECONDS)
    return [
        _erase_after_sessions(
            tenant=tenant,
            diner_id=diner_id,
            sessions=ended,
            requested_by=requested_by,
            batch=batch,
        )
        for (tenant, diner_id), ended in zip(diners, sessions, strict=True)
    ]


def _erase_after_sessions(
    *, tenant: Tenant, diner_id: str, sessions: int, requested_by: str, batch: int
) -> DinerErasure:
    hashed = diner_hash(diner_id)
    pseudonym = pseudonym_for(tenant=tenant, diner_id=diner_id)
    orders = _anonymise_orders(tenant=tenant, diner_id=diner_id, pseudonym=pseudonym)
    forgotten = erasure.forget_principal(
        tenant_key=str(tenant.pk),
        principal=f"diner:{diner_id}",
        also_records_showing=shown_in_replies(diner_id),
        batch=batch,
    )
    return DinerErasure.objects.create(
        tenant=tenant,
        diner_hash=hashed,
        pseudonym=pseudonym,
        requested_by=requested_by[:200],
        counts={"sessions": sessions, "orders": orders, **forgotten.as_dict()},
        guest=diner_id.startswith(GUEST_PREFIX),
    )


def shown_in_replies(diner_id: str) -> tuple[bytes, ...]:
    """The JSON a stored reply shows the diner with, as the API renders it (compact, UTF-8):
    an order's ``diner_id`` member, and a transition's actor ending in ``/diner:<id>``. In
    JSON text an unescaped quote only ever closes a string, so the closing quote makes each a
    whole value: ``alice`` does not match ``alice2``, nor a note that mentions her."""
    quoted = json.dumps(diner_id)
    return (f'"diner_id":{quoted}'.encode(), f"/diner:{quoted[1:]}".encode())


def pseudonym_for(*, tenant: Tenant, diner_id: str) -> str:
    """The pseudonym this erasure gives the diner's orders: the one an earlier erasure of the
    diner gave them, else :func:`pseudonym_of`. The earlier one is found by the log's hash
    under ``SECRET_KEY`` or a key of ``SECRET_KEY_FALLBACKS``: a rotation of the site's key
    changed :func:`pseudonym_of`, and an order placed after an erasure and erased after the
    rotation took a second pseudonym, one diner shown as two in the restaurant's books. Each
    erasure logs the hash under the key of its time with the pseudonym it kept, so the one
    after it finds it once the old key is dropped. Erasures at the same time read the same
    log, and so keep the same pseudonym."""
    earlier = (
        DinerErasure.objects.filter(tenant=tenant, diner_hash__in=diner_hashes(diner_id))
        .order_by("at", "pk")
        .values_list("pseudonym", flat=True)
        .first()
    )
    return earlier or pseudonym_of(tenant=tenant, diner_id=diner_id)


def pseudonym_of(*, tenant: Tenant, diner_id: str) -> str:
    """The diner's pseudonym in this restaurant: a keyed hash (``SECRET_KEY``) of the tenant
    and the id, so every erasure of the diner, one after the other or at the same time (a
    double submit, two staff), names the orders alike, and the same id in another restaurant
    gets another. It reveals no more than the erasure log's own hash: whoever knows the id
    and holds the key can tell that diner was erased, nobody else can tell who it was."""
    digest = salted_hmac(_PSEUDONYM_SALT, f"{tenant.pk}:{diner_id}", algorithm="sha256")
    return f"{PSEUDONYM_PREFIX}{digest.hexdigest()[:16]}"


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
