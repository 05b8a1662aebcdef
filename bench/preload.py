"""Bulk-load a benchmark database to scale: N idempotency records, N orders and their lines.

Not through the API (that would take hours): each table gets ``INSERT ... SELECT`` over
``generate_series`` in one statement, every row a copy of a real row the benchmark created
(its template) with the unique columns made unique. So the rows are as wide as real ones and
the indexes as large, which is what a create at scale pays for. ``VACUUM ANALYZE`` afterwards,
so autovacuum does not start during the measured rounds and the planner knows the sizes.

Used by ``bench/http_load.py`` (case ``create_1m``); order ids 1..N are far below any real
order id (those carry a tick of 10 ms since 2026 in their high bits, ``ordering/order_ids.py``).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql

RECORDS = "idempotency_idempotencyrecord"
ORDERS = "ordering_order"
LINES = "ordering_orderline"
PREFIX = "preload-"


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The columns an INSERT names: all but identity (auto-increment) ones."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = %s AND is_identity = 'NO' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


def _copy_rows(
    conn: psycopg.Connection, table: str, template: str, n: int, overrides: dict[str, str]
) -> None:
    """INSERT ``n`` copies of the first row ``template`` (a WHERE clause) selects, with
    ``overrides`` (column -> SQL expression over ``g``, the row's number 1..n)."""
    columns = _columns(conn, table)
    select = [
        sql.SQL(overrides[c]) if c in overrides else sql.SQL("t.{}").format(sql.Identifier(c))
        for c in columns
    ]
    query = sql.SQL(
        "INSERT INTO {table} ({cols}) SELECT {select} FROM "
        "(SELECT * FROM {table} WHERE {template} LIMIT 1) t CROSS JOIN generate_series(1, {n}) g"
    ).format(
        table=sql.Identifier(table),
        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
        select=sql.SQL(", ").join(select),
        template=sql.SQL(template),
        n=sql.Literal(n),
    )
    inserted = conn.execute(query).rowcount
    if inserted != n:
        raise RuntimeError(f"{table}: no template row ({template}) or only {inserted} copies")


def preload(dsn: str, *, n: int = 1_000_000) -> dict[str, Any]:
    """Load ``n`` records, orders and lines into the database at ``dsn``; what it took."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tenants = [r[0] for r in conn.execute("SELECT id FROM tenants_tenant ORDER BY id")]
        pick_tenant = f"(ARRAY{tenants}::bigint[])[1 + g % {len(tenants)}]"
        conn.execute("SET synchronous_commit = off")
        _copy_rows(
            conn,
            RECORDS,
            "response_status = 201 AND tenant_key <> '0'",
            n,
            {"tenant_key": f"({pick_tenant})::text", "key": f"'{PREFIX}' || g"},
        )
        _copy_rows(
            conn,
            ORDERS,
            "idempotency_key IS NOT NULL",
            n,
            {
                "id": "g",
                "tenant_id": pick_tenant,
                "idempotency_key": f"'{PREFIX}' || g",
                "note": f"'{PREFIX}' || g",
                "number": "NULL",
                "business_day": "NULL",
                "created_at": "now() - g * interval '1 second'",
                "updated_at": "now() - g * interval '1 second'",
            },
        )
        _copy_rows(conn, LINES, "true", n, {"order_id": "g", "tenant_id": pick_tenant})
        loaded = time.monotonic() - started
        for table in (RECORDS, ORDERS, LINES):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    return {
        "rows_per_table": n,
        "load_seconds": round(loaded, 1),
        "vacuum_seconds": round(time.monotonic() - started - loaded, 1),
    }


def record_bytes_per_row(dsn: str) -> dict[str, Any]:
    """The record table's size on disk (heap, TOAST and indexes) per row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        size, rows = conn.execute(
            sql.SQL("SELECT pg_total_relation_size(%s), (SELECT count(*) FROM {})").format(
                sql.Identifier(RECORDS)
            ),
            (RECORDS,),
        ).fetchone()
    return {"rows": rows, "bytes": size, "bytes_per_row": round(size / rows) if rows else None}
