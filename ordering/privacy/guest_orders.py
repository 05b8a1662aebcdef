"""A guest's order cancelled before any payment is deleted once it has long stopped moving.

An order's diner id, lines and moves stay for the restaurant's books: money was paid, or may
still be. A guest's order cancelled before a payment was ever started (left unpaid until the
platform expired it, or cancelled by the guest or the restaurant) moved no money, and nobody
can ask for it again once its guest's sessions have expired: the guest's id is the server's
random ``guest_…``, known only to those sessions (24 h, refreshed up to
``DINER_SESSION_MAX_AGE_SECONDS``). Kept until the restaurant left the platform, it was a record
of a person's visit (their id, what they nearly ordered, when, through which app) with no use.
``GUEST_UNPAID_ORDER_RETENTION_DAYS`` (30) after its last change (``updated_at``), once no
session of its guest lives, the retention purge (:mod:`tenants.retention`) deletes it with its
lines and moves, in batches. An erased guest's order carries the pseudonym instead, and is
found through the erasure's log row, which says it erased a guest.

An order any other row points at is left as it is (a payment, even a declined one a provider
may still capture late; an outbox event, a callback, a provider conflict, a compensation, a
dead letter): those are money's bookkeeping, and an order of a registered diner is in the
diner's own history until the diner is erased.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Exists, OuterRef, Q, QuerySet

from ordering.models import DinerErasure, Order
from ordering.models.orders import GUEST_CANCELLED
from ordering.privacy.order_batches import over_orders
from tenants.diner_sessions import GUEST_PREFIX
from tenants.models import DinerSession
from tenants.retention import register_kind
from tenants.write_fence import writable

KIND = "guest_unpaid_orders"


def guest_orders_past_retention(now: datetime) -> Q:
    """Guests' orders cancelled, unchanged since before the retention, that no row but their
    own lines and moves points at; not those of a tenant being offboarded (fenced, and its
    offboarding deletes them). Read through the partial index ``order_guest_cancelled``,
    whose condition is ``GUEST_CANCELLED``."""
    cutoff = now - timedelta(days=settings.GUEST_UNPAID_ORDER_RETENTION_DAYS)
    return (
        GUEST_CANCELLED
        & Q(updated_at__lt=cutoff)
        & _of_a_guest()
        & _nothing_else_points_at_it()
        & ~Q(Exists(_live_sessions_of_its_guest(now)))
        & writable()
    )


def _of_a_guest() -> Q:
    """A guest's order: its id is the guest's (``guest_…``), or the pseudonym an erasure of a
    guest gave it. An erased guest asked for less to be kept, not more: without the second,
    the order outlived the retention of a guest who asked nothing."""
    erased_guests = DinerErasure.objects.filter(
        tenant=OuterRef("tenant"), pseudonym=OuterRef("diner_id"), guest=True
    )
    return Q(diner_id__startswith=GUEST_PREFIX) | Q(Exists(erased_guests))


def _live_sessions_of_its_guest(now: datetime) -> QuerySet[DinerSession]:
    """The guest's sessions not expired yet: a refreshed one lives up to
    ``DINER_SESSION_MAX_AGE_SECONDS`` (30 days, settable) and lists the guest's orders."""
    return DinerSession.objects.filter(
        tenant=OuterRef("tenant"), diner_id=OuterRef("diner_id"), expires_at__gt=now
    )


def _nothing_else_points_at_it() -> Q:
    """No row of a table whose foreign key to the order does not cascade (found from the
    models, so a table added later keeps its orders too)."""
    condition = Q()
    for relation in Order._meta.related_objects:
        if relation.on_delete is models.CASCADE:
            continue
        referrers = relation.related_model._base_manager.filter(
            **{relation.field.name: OuterRef("pk")}
        )
        condition &= ~Q(Exists(referrers))
    return condition


def register() -> None:
    """Make the retention purge delete them (from the ordering app's ``ready()``)."""
    register_kind(
        KIND,
        Order,
        guest_orders_past_retention,
        over_orders(lambda orders: orders.delete()[1].get(Order._meta.label, 0)),
    )
