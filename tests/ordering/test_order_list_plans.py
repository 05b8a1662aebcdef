"""What the order list's statements read: a diner's filtered page reads that diner's rows of
its restaurant only, and its count only the rows it counts, whatever the other diners and
restaurants hold (EXPLAIN ANALYZE of the statements the API sends, on a table of 30,000
orders loaded by SQL and analysed)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import api_for

pytestmark = pytest.mark.django_db

KIOSK = "kiosk"
KIOSK_ORDERS = 10_000


def load(*, tenant, other_tenant) -> None:
    """The kiosk's 10,000 orders, all CREATED; 10,000 CANCELLED orders of other diners of the
    restaurant and 10,000 of another restaurant's kiosk; the newest are the others'."""
    rows = [
        (tenant.pk, f"'{KIOSK}'", "'CREATED'", 0),
        (tenant.pk, "'diner-' || (g % 500)", "'CANCELLED'", KIOSK_ORDERS),
        (other_tenant.pk, f"'{KIOSK}'", "'CANCELLED'", 2 * KIOSK_ORDERS),
    ]
    with connection.cursor() as db:
        for tenant_id, diner, status, first in rows:
            db.execute(
                "INSERT INTO ordering_order (id, tenant_id, diner_id, status, payment_method,"
                " subtotal, discount, total, currency, note, created_at, updated_at,"
                " contact_phone, delivery_address)"
                f" SELECT {10**15} + g, {tenant_id}, {diner}, {status}, 'card', 10, 0, 10,"
                " 'EUR', '', now() - interval '1 day' + g * interval '1 second', now(), '', ''"
                f" FROM generate_series({first + 1}, {first + KIOSK_ORDERS}) g"
            )
        db.execute("ANALYZE ordering_order")


def rows_read(sql: str) -> int:
    """Rows the statement's scans of the orders table read: those they returned and those
    their filters dropped."""
    with connection.cursor() as db:
        db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = db.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node: dict) -> int:
        own = 0
        if node.get("Relation Name") == "ordering_order":
            loops = node.get("Actual Loops", 1)
            own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * loops
        return own + sum(walk(child) for child in node.get("Plans", []))

    return walk(plan[0]["Plan"])


def test_a_diner_s_page_and_count_of_a_status_it_has_none_in_read_only_that_diner_s_orders(
    tenant, other_tenant
):
    """Red before: the diner's page of CANCELLED orders (it has none) walked the index of
    every restaurant's orders by creation (30,000 rows read; on a table of 200,000 orders,
    320 ms a page), and its count read through the index of every restaurant's diners of that
    id (20,000 rows), or of every restaurant's orders of that status (on 200,000 orders,
    50,000 rows to count none), dropping the others'. One load per test: rows a test rolls
    back stay in the table's indexes until a vacuum, and moved the next test's plans."""
    # given a restaurant's kiosk diner with 10,000 orders among 30,000, none CANCELLED
    load(tenant=tenant, other_tenant=other_tenant)
    # when the kiosk lists its CANCELLED orders
    with CaptureQueriesContext(connection) as queries:
        answer = api_for(tenant, diner=KIOSK).get("/api/v1/orders/?status=CANCELLED")
    assert (answer.json()["results"], answer.json()["count"]) == ([], 0)
    reads = [q["sql"] for q in queries if 'FROM "ordering_order"' in q["sql"]]
    [page] = [sql for sql in reads if "ORDER BY" in sql and "COUNT(" not in sql]
    [count] = [sql for sql in reads if sql.startswith("SELECT COUNT(*)")]
    # then the page reads at most the kiosk's own orders of this restaurant, and the count
    # none (the kiosk has none to count)
    assert rows_read(page) <= KIOSK_ORDERS
    assert rows_read(count) == 0
