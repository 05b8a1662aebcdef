"""What the guest order purge reads: the rows it may delete, not the whole orders table.

The purge runs every hour and ``/metrics`` counts its overdue rows on every scrape
(:func:`tenants.retention.overdue_rows`), across every restaurant; the orders it looks for (a
guest's, cancelled) are a sliver of a table that holds every order ever placed (EXPLAIN
ANALYZE of the statements sent, on a table of 30,100 orders loaded by SQL and analysed)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ordering.models import Order
from tenants.retention import overdue_rows, purge_expired_data
from tests.ordering.test_order_list_plans import rows_read

# Committed and then truncated, not rolled back: rows a test rolls back stay in the table's
# indexes until a vacuum, and moved the plans of the tests after it
# (tests/ordering/test_order_list_plans.py).
pytestmark = pytest.mark.django_db(transaction=True)

GUEST_ORDERS = 100
KEPT_ORDERS = 15_000


def load(tenant) -> None:
    """15,000 guests' orders completed two months ago (the restaurant's sales, kept), 15,000
    named diners' orders cancelled as long ago (kept), and 100 guests' orders cancelled as long
    ago (to delete)."""
    rows = [
        ("'guest_c' || g", "'COMPLETED'", 0),
        ("'diner-' || (g % 500)", "'CANCELLED'", KEPT_ORDERS),
        ("'guest_x' || g", "'CANCELLED'", 2 * KEPT_ORDERS),
    ]
    with connection.cursor() as db:
        for diner, status, first in rows:
            count = GUEST_ORDERS if first == 2 * KEPT_ORDERS else KEPT_ORDERS
            db.execute(
                "INSERT INTO ordering_order (id, tenant_id, diner_id, status, payment_method,"
                " subtotal, discount, total, currency, note, created_at, updated_at,"
                " contact_phone, delivery_address)"
                f" SELECT {10**15} + g, {tenant.pk}, {diner}, {status}, 'card', 10, 0, 10,"
                " 'EUR', '', now() - interval '60 days', now() - interval '60 days', '', ''"
                f" FROM generate_series({first + 1}, {first + count}) g"
            )
        db.execute("ANALYZE ordering_order")


class Undone(Exception):
    """Rolls the purge back, so its statements can be explained over the rows it read."""


def test_the_purge_and_its_overdue_count_read_guests_cancelled_orders_only(tenant) -> None:
    """Red before: no index held a guest's cancelled orders, so the overdue count of every
    /metrics scrape, and each batch of the hourly purge, read every guest's order ever placed
    (through the index of diner ids) or every order, 15,100 or 30,100 rows here, to find
    100."""
    load(tenant)

    with CaptureQueriesContext(connection) as sent:
        overdue = overdue_rows()["guest_unpaid_orders"]
        with pytest.raises(Undone), transaction.atomic():
            purge_expired_data()
            assert not Order.all_tenants.filter(diner_id__startswith="guest_x").exists()
            raise Undone

    assert overdue == GUEST_ORDERS
    reads = [
        q["sql"]
        for q in sent
        if q["sql"].startswith("SELECT")
        and 'FROM "ordering_order"' in q["sql"]
        and "LIKE  E'guest\\\\_%'" in q["sql"]
    ]
    assert len(reads) >= 2  # the count, and the purge's batches
    # each reads the guests' cancelled orders at most, not every guest's order nor every order
    read = [rows_read(sql) for sql in reads]
    assert max(read) <= GUEST_ORDERS, read
