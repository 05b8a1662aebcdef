"""Short order numbers for people: ``#0427``, a sequence per tenant and business day.

The number is taken in the placing transaction by an upsert of the day's counter row
(``INSERT ... ON CONFLICT (tenant, day) DO UPDATE SET last = last + 1 RETURNING last``): the
database hands out each number once, however many orders are placed at the same moment, and an
order that is refused afterwards rolls its number back with everything else, so the day's
numbers have no gaps. The counter row stays locked until the placing transaction ends; placing
takes it last (after the dishes' stock and the coupon, so the lock order is the same in every
transaction and cannot deadlock), which keeps that wait to the transaction's end: the upsert
leads the statement that writes the order (:func:`numbered`, ``ordering/one_statement.py``),
which takes the number from it, so numbering costs no round trip of its own.
``unique(tenant, business_day, number)`` on orders backs it up.

The business day is the tenant's calendar day (``Tenant.time_zone``): numbers restart at local
midnight, as a restaurant's order pad would.
"""

from __future__ import annotations

from datetime import date

from django.db import connection
from django.utils import timezone

from ordering.models import OrderNumberCounter
from ordering.one_statement import Leading
from tenants.models import Tenant


def business_day(tenant: Tenant) -> date:
    return timezone.localdate(timezone=tenant.zone)


def numbered(*, tenant: Tenant, day: date) -> Leading:
    """The upsert that takes the next number of ``tenant`` for ``day`` (1 for the day's first
    order), to lead the statement that writes the order (its ``number`` set to the
    placeholder)."""
    table = connection.ops.quote_name(OrderNumberCounter._meta.db_table)
    sql = (
        f"INSERT INTO {table} (tenant_id, day, last) VALUES (%s, %s, 1) "
        f"ON CONFLICT (tenant_id, day) DO UPDATE SET last = {table}.last + 1 "
        "RETURNING last"
    )
    return Leading(sql, [tenant.pk, day])
