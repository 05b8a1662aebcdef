"""The order list (``GET /api/v1/orders/``), read a page at a time from a cursor.

A page is the orders just after a place in the list (older ones), or just before it (newer
ones), newest first by ``(created_at, id)`` (:mod:`ordering.order_cursor`): a keyset read,
``WHERE (created_at, id) < (%s, %s) ORDER BY created_at DESC, id DESC LIMIT n + 1`` (the one
more tells whether another page follows). Orders placed or moved between two reads leave the
pages still to come as they were, and a deep page costs what the first does (no ``OFFSET``
skipping rows).

Three round trips a page, whose statements are compiled once per process: the page's orders
with their coupons, then their lines and payments (:func:`ordering.prefetch.read_related_of`),
then the ``COUNT`` of the list (the answer's ``count``, which clients of the list's
page-number answer read), which stops at ``COUNT_LIMIT`` as the admin's lists do: a
restaurant's key listing 200,000 orders had every page count all of them, a scan of the
tenant's rows per request that grew with the tenant and no client needs past a few pages.
Building and compiling the ORM's queries and the prefetch's querysets for every page had cost
a worker more than PostgreSQL's reads (``bench/api_reads.py``). Where statements do not ride
along (the embedded demo's SQLite), or a statement cannot be kept, it reads through the ORM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.db import connections, router
from django.db.models import F, QuerySet
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan
from django.db.models.query import prefetch_related_objects

from idempotency.core.transactions import statements_ride_along
from ordering.models import Order
from ordering.order_cursor import Cursor
from ordering.prefetch import JoinedRead, read_related_of
from ordering.selectors import orders_of
from tenants.models import Tenant

# what a listed order shows besides itself (ordering.api.rendering.render_order, detail=False)
LISTED_RELATIONS = ("lines", "payments")
# orders a page of the API's list holds
PAGE_SIZE = 20
# the most orders a list's count reads (README: "count ... at most 10,000"); a list holding
# more answers this number
COUNT_LIMIT = 10_000
NEWEST_FIRST = ("-created_at", "-id")
OLDEST_FIRST = ("created_at", "id")
# per (a diner named, a status named, where the page starts, database): its read, compiled once
_READS: dict[tuple[bool, bool, str, str], JoinedRead] = {}
# The list's count per shape (a diner's or not, filtered by status or not, database): its text
_COUNTS: dict[tuple[bool, bool, str], str] = {}


@dataclass(frozen=True)
class OrderPage:
    """A page of the list, newest first, and the places of the pages beside it (None: there
    is none, as far as this read saw)."""

    orders: list[Order]
    next: Cursor | None
    previous: Cursor | None
    count: int  # the list's orders (all its pages) up to COUNT_LIMIT, in the same snapshot


def read_page(
    *,
    tenant: Tenant,
    diner_id: str | None,
    status: str | None,
    cursor: Cursor | None,
    size: int = PAGE_SIZE,
) -> OrderPage:
    """The caller's orders (:func:`orders_of`, maybe only those in ``status``) from ``cursor``
    (None: the newest), at most ``size``, each holding its coupon, lines
    and payments. Call it inside :func:`ordering.selectors.one_moment`, so that the orders and
    their relations are read from one snapshot."""
    read = _OrderRead(tenant=tenant, diner_id=diner_id, status=status)
    rows = read.run(cursor, size + 1)
    more, rows = len(rows) > size, rows[:size]  # one more read: whether another page follows
    count = read.count()
    if cursor is not None and cursor.backwards:
        rows.reverse()  # read oldest first from the place, shown newest first
        previous = _place(rows[0], backwards=True) if more else None
        following = _place(rows[-1]) if rows else replace(cursor, backwards=False)
        return OrderPage(orders=rows, next=following, previous=previous, count=count)
    following = _place(rows[-1]) if more else None
    previous = None  # the first page: nothing newer
    if cursor is not None:  # a page after another: the orders before it are one page back
        previous = _place(rows[0], backwards=True) if rows else replace(cursor, backwards=True)
    return OrderPage(orders=rows, next=following, previous=previous, count=count)


def _place(order: Order, *, backwards: bool = False) -> Cursor:
    """The place just after ``order`` (or, ``backwards``, just before it)."""
    return Cursor(created_at=order.created_at, order_id=order.pk, backwards=backwards)


class _OrderRead:
    """One page's read of the orders, with their coupons, from a place in the list."""

    def __init__(self, *, tenant: Tenant, diner_id: str | None, status: str | None) -> None:
        self.tenant, self.diner_id, self.status = tenant, diner_id, status
        self.using = router.db_for_read(Order)

    def run(self, cursor: Cursor | None, limit: int) -> list[Order]:
        params = [
            *self._list_params(),
            *([] if cursor is None else [cursor.created_at, cursor.order_id]),
        ]
        read = self._compiled(cursor, params)
        if read is None:
            held = self._queryset(cursor).select_related("coupon")
            return list(held.prefetch_related(*LISTED_RELATIONS)[:limit])
        with connections[self.using].cursor() as db:
            db.execute(f"{read.sql} LIMIT %s", [*params, limit])
            orders = [read.instance(row, using=self.using) for row in db.fetchall()]
        tenant_field = Order._meta.get_field("tenant")
        for order in orders:
            tenant_field.set_cached_value(order, self.tenant)
        if not read_related_of(orders, *LISTED_RELATIONS, using=self.using):
            prefetch_related_objects(orders, *LISTED_RELATIONS)
        return orders

    def count(self) -> int:
        """How many orders the whole list holds, up to ``COUNT_LIMIT``: the ``count`` a client
        shows ("12 orders") and the API's list answered before it paged by cursor. One
        statement that reads at most ``COUNT_LIMIT`` of the tenant's (and diner's) orders, in
        the page's snapshot, its text compiled once per shape; where statements do not ride
        along, the ORM's count of the list so limited."""
        if not statements_ride_along(self.using):
            return self._list()[:COUNT_LIMIT].count()
        params = self._list_params()
        shape = (self.diner_id is not None, self.status is not None, self.using)
        sql = _COUNTS.get(shape)
        if sql is None:
            listed = self._list().order_by().values("pk").query
            inner, inner_params = listed.get_compiler(using=self.using).as_sql()
            if list(inner_params) != params:  # a constant of the text: not this shape's
                return self._list()[:COUNT_LIMIT].count()
            sql = _COUNTS[shape] = f"SELECT COUNT(*) FROM ({inner} LIMIT %s) AS listed"
        with connections[self.using].cursor() as db:
            db.execute(sql, [*params, COUNT_LIMIT])
            return db.fetchone()[0]

    def _list_params(self) -> list[object]:
        """The list's parameters, in the order its statements take them."""
        return [
            self.tenant.pk,
            *([] if self.diner_id is None else [self.diner_id]),
            *([] if self.status is None else [self.status]),
        ]

    def _list(self) -> QuerySet[Order]:
        orders = orders_of(tenant=self.tenant, diner_id=self.diner_id)
        return orders if self.status is None else orders.filter(status=self.status)

    def _queryset(self, cursor: Cursor | None) -> QuerySet[Order]:
        orders = self._list()
        if cursor is None:
            return orders.order_by(*NEWEST_FIRST)
        place = Tuple(F("created_at"), F("id"))
        if cursor.backwards:
            newer = TupleGreaterThan(place, (cursor.created_at, cursor.order_id))
            return orders.filter(newer).order_by(*OLDEST_FIRST)
        older = TupleLessThan(place, (cursor.created_at, cursor.order_id))
        return orders.filter(older).order_by(*NEWEST_FIRST)

    def _compiled(self, cursor: Cursor | None, params: list[object]) -> JoinedRead | None:
        """This shape's read, compiled the first time; None where it cannot be kept (read
        through the ORM then, and compiled again next time)."""
        connections[self.using].ensure_connection()  # whether statements ride along
        if not statements_ride_along(self.using):
            return None
        start = "newest" if cursor is None else "before" if cursor.backwards else "after"
        shape = (self.diner_id is not None, self.status is not None, start, self.using)
        known = _READS.get(shape)
        if known is not None:
            return known
        rows = self._queryset(cursor).select_related("coupon")
        read = JoinedRead.of(rows, params, using=self.using)
        if read is not None:
            _READS[shape] = read
        return read
