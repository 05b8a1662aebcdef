"""Reads of orders and the menu, always within one tenant (and one diner when given)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import connections, router, transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from idempotency.core.transactions import execute_opening, statements_ride_along
from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Coupon, Dish, Order, OrderLine
from ordering.models.orders import OPEN_STATUSES, number_label
from ordering.prefetch import (
    compiled_read,
    read_related,
    read_with_related,
    reads_together,
    values_read,
)
from tenants.models import Tenant


@contextmanager
def one_moment(using: str) -> Iterator[None]:
    """Read in one snapshot of the database: a read-only REPEATABLE READ transaction on
    PostgreSQL, unless the caller is in a transaction already.

    Each statement reads the database as it is when it starts, so a page that reads an order,
    then its payments or its log, could show the order PAYING with its payment succeeded (a
    callback committing in between), a state it never was in: the order list (a page is two
    queries), the dashboard's order page. A read-only transaction is never refused for a
    write committed meanwhile; it costs two round trips, the ``BEGIN`` (the ``SET
    TRANSACTION`` riding along with it where statements ride along) and the ``COMMIT``.
    (One query holding several statements is made one moment by
    :func:`ordering.prefetch.read_with_related` at no cost.)"""
    connection = connections[using]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if statements_ride_along(using):
            execute_opening(cursor, _SNAPSHOT, [])
        else:
            cursor.execute(_SNAPSHOT)
        yield


_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


def menu_of(*, tenant: Tenant) -> QuerySet[Dish]:
    return Dish.objects.for_tenant(tenant).filter(active=True).order_by("name")


# The columns of a dish that the menu shows (ordering.api.rendering.menu_entry's), in order.
MENU_COLUMNS = ("id", "name", "description", "price", "stock")


def menu_rows(*, tenant: Tenant) -> list[tuple[Any, ...]]:
    """The tenant's menu (:func:`menu_of`) as plain values of :data:`MENU_COLUMNS`. Every
    diner's app reads it whenever it opens: no model instances, and SQL compiled once per
    process (:func:`values_read`)."""
    return values_read(
        "menu",
        lambda: menu_of(tenant=tenant).values_list(*MENU_COLUMNS),
        [tenant.pk],
        using=router.db_for_read(Dish),
    )


def orders_of(*, tenant: Tenant, diner_id: str | None = None) -> QuerySet[Order]:
    """A tenant's orders; a diner app acting for one diner sees only that diner's orders."""
    orders = Order.objects.for_tenant(tenant)
    if diner_id is not None:
        orders = orders.filter(diner_id=diner_id)
    return orders


def access_order(
    *, tenant: Tenant, order_id: int, diner_id: str | None = None, related: Sequence[str] = ()
) -> Order:
    """The order if this caller may see it; 404 ``ORDER_NOT_FOUND`` otherwise. Another
    tenant's (or diner's) order is indistinguishable from one that does not exist.

    ``related``: reverse relations read with it and held (as :func:`read_related` holds them),
    for a move's condition or an answer that shows them. Where statements ride along
    (PostgreSQL), the order and its relations are read in one query, one round trip, by SQL
    compiled once per process (:func:`read_with_related`; when the order is not this caller's,
    what the relations' statements read is dropped unseen): building the ORM's query for the
    order cost about as much of the worker's CPU as PostgreSQL's running it. Elsewhere the
    ORM reads the order, then :func:`read_related` its relations."""
    using = router.db_for_read(Order)
    connections[using].ensure_connection()  # whether statements ride along is known once open
    lead = reads = probe = None
    if isinstance(order_id, int) and _BIGINT[0] <= order_id <= _BIGINT[1]:
        lead = _order_read(tenant=tenant, order_id=order_id, diner_id=diner_id, using=using)
    if lead is not None:
        probe = Order(pk=order_id, tenant=tenant)
        reads = reads_together(Order, related, using=using, probe=probe)
    if lead is not None and reads is not None:
        sql, params = lead
        order = read_with_related(Order, sql, params, probe=probe, reads=reads, using=using)
    else:
        try:
            order = orders_of(tenant=tenant, diner_id=diner_id).get(pk=order_id)
        except (Order.DoesNotExist, ValueError, OverflowError):
            order = None
        else:
            read_related(order, *related)
    if order is None:
        raise OrderingError(OrderingErrorCode.ORDER_NOT_FOUND, "Order not found")
    return order


_BIGINT = (-(2**63), 2**63 - 1)
# per (whether a diner is named, database): the SQL of access_order's read, compiled once
_ORDER_READS: dict[tuple[bool, str], str] = {}


def _order_read(
    *, tenant: Tenant, order_id: int, diner_id: str | None, using: str
) -> tuple[str, list[object]] | None:
    """:func:`access_order`'s query as SQL and its parameters (the tenant's key, the diner,
    the order's key); None where its compiled form is not that (read through the ORM then)."""
    params = [tenant.pk, *([] if diner_id is None else [diner_id]), order_id]
    key = (diner_id is None, using)
    sql = _ORDER_READS.get(key)
    if sql is None:
        rows = orders_of(tenant=tenant, diner_id=diner_id).filter(pk=order_id)
        compiled = compiled_read(rows, params, using=using)
        if compiled is None or compiled[1]:  # from_db takes the driver's values as they are
            return None
        sql = _ORDER_READS[key] = compiled[0]
    return sql, params


# --- dashboard reads (merchant pages); another tenant's id is "not found", never "forbidden" --


# How many orders the board shows: the newest ones, and as many again of the open ones.
BOARD_SIZE = 200
# The orders the kitchen still has to act on: paid for and not finished (a refund under way
# included). Anyone holding the app's public key can place and cancel orders, hundreds a
# minute, so the newest orders alone could all be that; these it cannot make without paying.
# The orders' partial index order_tenant_open_newest is of these statuses.
BOARD_OPEN_STATUSES = OPEN_STATUSES
# The columns of an order that its card shows (BoardCard's, in order); the card's other
# content, its lines, is written once, with the order.
BOARD_CARD_COLUMNS = ("id", "number", "status", "total", "currency", "created_at")
# What the board's version reads: those, and the column that changes with any write.
BOARD_VERSION_COLUMNS = (*BOARD_CARD_COLUMNS, "updated_at")


class BoardLine(NamedTuple):
    quantity: int
    dish_name: str


@dataclass(frozen=True)
class BoardCard:
    """One card of the board: the order's values it shows, and its lines."""

    pk: int
    number: int | None
    status: str
    total: Decimal
    currency: str
    created_at: datetime
    lines: list[BoardLine]

    @property
    def number_label(self) -> str:
        return number_label(self.number, self.pk)


def board_cards(*, tenant: Tenant, limit: int = BOARD_SIZE) -> list[BoardCard]:
    """The newest ``limit`` orders, and the newest ``limit`` open ones
    (:data:`BOARD_OPEN_STATUSES`) however old, as the board's cards, newest first, from three
    reads of plain values: the two windows' columns the cards show, then those orders' lines
    (written with each order, so an order read first has all of them). No model instances:
    every open board renders its cards again whenever one changes."""
    rows = _newest_first(
        row
        for window in _board_windows(tenant, limit)
        for row in window.values_list(*BOARD_CARD_COLUMNS)
    )
    lines: dict[int, list[BoardLine]] = {row[0]: [] for row in rows}
    read = OrderLine.objects.for_tenant(tenant).filter(order_id__in=list(lines)).order_by("id")
    for order_id, quantity, dish_name in read.values_list("order_id", "quantity", "dish_name"):
        lines[order_id].append(BoardLine(quantity, dish_name))
    return [BoardCard(*row, lines=lines[row[0]]) for row in rows]


def board_version(*, tenant: Tenant, limit: int = BOARD_SIZE) -> str:
    """A digest of the board's cards: which orders are the newest ``limit``, in which order,
    and each one's :data:`BOARD_VERSION_COLUMNS`. A new order, a move or an order gone changes it.

    It reads those columns as text (no lines, no model instances, no values to convert), by
    SQL compiled once per process: a poll of a board that has not changed costs this one
    small query instead of rendering every card again.
    """
    newest, open_ = _board_windows(tenant, limit)
    using = router.db_for_read(Order)
    texts = [
        values_read(("board_version", limit), lambda: _texts(newest), [tenant.pk], using=using),
        values_read(
            ("board_version_open", limit),
            lambda: _texts(open_),
            [tenant.pk, *BOARD_OPEN_STATUSES],
            using=using,
        ),
    ]
    return hashlib.blake2b(repr(texts).encode(), digest_size=16).hexdigest()


def _texts(window: QuerySet[Order]) -> QuerySet[Order]:
    return window.values_list(*(Cast(column, TextField()) for column in BOARD_VERSION_COLUMNS))


def _board_windows(tenant: Tenant, limit: int) -> tuple[QuerySet[Order], QuerySet[Order]]:
    """The board's two windows: the newest ``limit`` orders, and the newest ``limit`` open
    ones. Two reads, each served by an index of the tenant's orders in the window's order
    (``order_tenant_newest``, and ``order_tenant_open_newest`` of the open ones alone), where
    one read of either kind would go through every order of the tenant."""
    orders = orders_of(tenant=tenant).order_by("-created_at", "-id")
    return orders[:limit], orders.filter(status__in=BOARD_OPEN_STATUSES)[:limit]


def _newest_first(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows of :data:`BOARD_CARD_COLUMNS` from both windows, each order once, newest first."""
    created_at = BOARD_CARD_COLUMNS.index("created_at")
    once = {row[0]: row for row in rows}
    return sorted(once.values(), key=lambda row: (row[created_at], row[0]), reverse=True)


def order_for_dashboard(*, tenant: Tenant, order_id: int) -> Order | None:
    """One order with its lines, payments and transition log, or None if not this tenant's."""
    return (
        orders_of(tenant=tenant)
        .select_related("coupon")
        .prefetch_related("lines", "payments", "transitions")
        .filter(pk=order_id)
        .first()
    )


def dishes_of(*, tenant: Tenant) -> QuerySet[Dish]:
    """Every dish of the tenant, active or not (the menu page manages both)."""
    return Dish.objects.for_tenant(tenant).order_by("name")


def dish_of(*, tenant: Tenant, dish_id: int) -> Dish | None:
    return Dish.objects.for_tenant(tenant).filter(pk=dish_id).first()


def coupons_of(*, tenant: Tenant) -> QuerySet[Coupon]:
    return Coupon.objects.for_tenant(tenant).order_by("-active", "code")


def active_coupons_of(*, tenant: Tenant) -> QuerySet[Coupon]:
    return coupons_of(tenant=tenant).filter(active=True)


def inactive_coupons_newest_first(*, tenant: Tenant) -> QuerySet[Coupon]:
    return Coupon.objects.for_tenant(tenant).filter(active=False).order_by("-pk")


def coupon_of(*, tenant: Tenant, coupon_id: int) -> Coupon | None:
    return Coupon.objects.for_tenant(tenant).filter(pk=coupon_id).first()
