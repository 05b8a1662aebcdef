"""The order list (``GET /api/v1/orders/``) as DRF's page-number paginator takes it.

The paginator asks its list for a count, then for one slice. Given a queryset with
``select_related`` and ``prefetch_related``, that was four statements (the count, the page's
orders with their coupons, their lines, their payments), each built and compiled afresh by the
ORM, and the prefetch's querysets made again for every order of the page: about 5 ms of a
worker's CPU for a page of 20 (``bench/api_reads.py``). :class:`OrderList` answers the same
count and slice in two round trips whose statements are compiled once per process: the count
with the page the request asks for, then the page's lines and payments
(:func:`ordering.prefetch.read_related_of`). Where statements do not ride along (the embedded
demo's SQLite), or a statement cannot be kept, it reads through the ORM as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from django.db import connections, router
from django.db.models import QuerySet
from django.db.models.query import prefetch_related_objects

from idempotency.core.transactions import statements_ride_along
from ordering.models import Order
from ordering.prefetch import JoinedRead, compiled_sql, read_related_of
from ordering.selectors import orders_of
from tenants.models import Tenant

# what a listed order shows besides itself (ordering.api.rendering.render_order, detail=False)
LISTED_RELATIONS = ("lines", "payments")


@dataclass(frozen=True)
class _Reads:
    """The list's two statements for one shape of filter: how many orders it holds, and its
    orders with their coupons, newest first (``page``, whose ``sliced`` text reads them from a
    place: ``LIMIT %s OFFSET %s`` appended to the ORM's ordered query, as Django writes a
    slice with the numbers in the text)."""

    count: str
    page: JoinedRead

    @cached_property
    def sliced(self) -> str:
        return f"{self.page.sql} LIMIT %s OFFSET %s"


# A slice ending past this offset is not read along with the count: PostgreSQL's OFFSET and
# LIMIT are 64-bit integers (no list is that long; the paginator answers 404 from the count).
LAST_OFFSET = 2**63 - 1
# per (a diner named, a status named, database): the list's reads, compiled once
_READS: dict[tuple[bool, bool, str], _Reads] = {}


class OrderList:
    """The orders a caller lists (:func:`orders_of`, maybe only those in ``status``), newest
    first, each holding its coupon, lines and payments.

    ``expected``: the slice the request asks for (from its page number), read with the count
    in one query, so that the paginator's slice that follows costs no round trip; any other
    slice is read when asked for."""

    def __init__(
        self, *, tenant: Tenant, diner_id: str | None, status: str | None, expected: slice | None
    ) -> None:
        self.tenant = tenant
        self.params: list[object] = [
            tenant.pk,
            *([] if diner_id is None else [diner_id]),
            *([] if status is None else [status]),
        ]
        if expected is not None and expected.stop > LAST_OFFSET:
            expected = None
        self.diner_id, self.status, self.expected = diner_id, status, expected
        self.using = router.db_for_read(Order)
        self._page: list[Order] | None = None

    def count(self) -> int:
        reads = self._reads()
        if reads is None:
            return self._queryset().count()
        statements, params = [reads.count], list(self.params)
        if self.expected is not None:
            statements.append(reads.sliced)
            params += self._sliced_params(self.expected)
        with connections[self.using].cursor() as cursor:
            cursor.execute("; ".join(statements), params)
            [(total,)] = cursor.fetchall()
            if self.expected is not None:
                cursor.nextset()
                self._page = self._orders(reads, cursor.fetchall())
        return total

    def __getitem__(self, wanted: slice) -> list[Order]:
        expected = self.expected
        if (
            self._page is not None
            and expected is not None
            and wanted.start == expected.start
            and wanted.stop <= expected.stop  # the last page: the paginator asks up to the count
        ):
            return self._page[: wanted.stop - wanted.start]
        reads = self._reads()
        if reads is None:
            held = self._queryset().select_related("coupon").prefetch_related(*LISTED_RELATIONS)
            return list(held[wanted])
        with connections[self.using].cursor() as cursor:
            cursor.execute(reads.sliced, self._sliced_params(wanted))
            return self._orders(reads, cursor.fetchall())

    def _sliced_params(self, wanted: slice) -> list[object]:
        """The parameters of :attr:`_Reads.sliced` for ``wanted``: the filter's, the limit,
        the offset."""
        return [*self.params, wanted.stop - wanted.start, wanted.start]

    def _orders(self, reads: _Reads, rows: list[tuple]) -> list[Order]:
        orders = [reads.page.instance(row, using=self.using) for row in rows]
        tenant_field = Order._meta.get_field("tenant")
        for order in orders:
            tenant_field.set_cached_value(order, self.tenant)
        if not read_related_of(orders, *LISTED_RELATIONS, using=self.using):
            prefetch_related_objects(orders, *LISTED_RELATIONS)
        return orders

    def _queryset(self) -> QuerySet[Order]:
        orders = orders_of(tenant=self.tenant, diner_id=self.diner_id)
        if self.status is not None:
            orders = orders.filter(status=self.status)
        return orders

    def _reads(self) -> _Reads | None:
        """This shape's statements, compiled the first time; None where they cannot be kept
        (read through the ORM then, and compiled again next time)."""
        connections[self.using].ensure_connection()  # whether statements ride along
        if not statements_ride_along(self.using):
            return None
        shape = (self.diner_id is not None, self.status is not None, self.using)
        known = _READS.get(shape)
        if known is not None:
            return known
        orders = self._queryset()
        keys = compiled_sql(orders.order_by().values("pk"), self.params, using=self.using)
        page = JoinedRead.of(orders.select_related("coupon"), self.params, using=self.using)
        if keys is None or page is None:
            return None
        _READS[shape] = _Reads(f"SELECT COUNT(*) FROM ({keys}) AS listed", page)
        return _READS[shape]
