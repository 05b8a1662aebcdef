"""docs/scaling.md's path to a tenant-distributed database, checked against PostgreSQL's catalog.

The rule: once the documented SQL has run, the primary key and every unique constraint or
unique index of every distributed table (a table with a tenant column, less the documented
reference tables) contain its tenant column. The test runs that very SQL, taken from the doc,
in a transaction it rolls back, then reads ``pg_constraint`` and ``pg_index``. It also holds
the documented exceptions of today's schema and checks each still exists as written, so the
doc's table cannot go stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection, transaction

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
TENANT_COLUMNS = ("tenant_id", "tenant_key")
# Tenant-owned, but looked up before the tenant is known: replicated to every node.
REFERENCE_TABLES = {"tenants_apiclient"}
# Today's unique constraints and indexes of tenant-owned tables that leave the tenant out
# (docs/scaling.md's table), as PostgreSQL prints them.
EXCEPTIONS_TODAY = {
    ("ordering_compensation", "uniq_compensation_id"): "UNIQUE (compensation_id)",
    ("ordering_deadletter", "uniq_open_dead_letter_key"): (
        "UNIQUE (key) WHERE ((state)::text = 'open'::text)"
    ),
    ("ordering_simulatedoperation", "uniq_simulated_platform_op_key"): (
        "UNIQUE (idempotency_key) WHERE (tenant_id IS NULL)"
    ),
    ("tenants_apiclient", "tenants_apiclient_prefix_key"): "UNIQUE (prefix)",
}

UNIQUE_KEYS = """
    SELECT t.relname,
           i.relname,
           x.indisprimary,
           ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY AS k(attnum, n)
                 JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
                 ORDER BY k.n)::text[],
           pg_get_expr(x.indpred, x.indrelid)
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_class t ON t.oid = x.indrelid
    JOIN pg_namespace ns ON ns.oid = t.relnamespace
    WHERE ns.nspname = current_schema() AND x.indisunique
    ORDER BY 1, 2
"""
TENANT_OWNED = """
    SELECT c.relname, a.attname
    FROM pg_class c
    JOIN pg_namespace ns ON ns.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE ns.nspname = current_schema() AND c.relkind = 'r' AND a.attname = ANY(%s)
"""
FOREIGN_KEYS = """
    SELECT c.conname, t.relname, f.relname,
           ARRAY(SELECT a.attname FROM unnest(c.conkey) AS k(attnum)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum)::text[]
    FROM pg_constraint c
    JOIN pg_class t ON t.oid = c.conrelid
    JOIN pg_class f ON f.oid = c.confrelid
    JOIN pg_namespace ns ON ns.oid = t.relnamespace
    WHERE ns.nspname = current_schema() AND c.contype = 'f'
"""
CONSTRAINTS = """
    SELECT c.conname, pg_get_constraintdef(c.oid)
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
    WHERE t.relname = %s AND c.contype IN ('p', 'u')
"""


def tenant_owned() -> dict[str, str]:
    """Every table with a tenant column, and that column."""
    with connection.cursor() as cursor:
        cursor.execute(TENANT_OWNED, [list(TENANT_COLUMNS)])
        return dict(cursor.fetchall())


def unique_keys() -> list[tuple[str, str, bool, list[str], str | None]]:
    """(table, index, is primary key, columns, predicate) of every primary key, unique
    constraint and unique index (constraints are backed by an index of the same name)."""
    with connection.cursor() as cursor:
        cursor.execute(UNIQUE_KEYS)
        return cursor.fetchall()


def documented_sql() -> str:
    """The migration's SQL: the doc's one ```sql block."""
    [block] = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return block


def links_between_distributed() -> set[tuple[str, str, str]]:
    """(table, column, target) of each foreign key between distributed tables, the tenant
    column left out: the migration must keep every one of them."""
    owned = tenant_owned()
    distributed = set(owned) - REFERENCE_TABLES
    with connection.cursor() as cursor:
        cursor.execute(FOREIGN_KEYS)
        return {
            (table, column, target)
            for _name, table, target, columns in cursor.fetchall()
            if table in distributed and target in distributed
            for column in columns
            if column != owned[table]
        }


def breaking_the_rule() -> list[str]:
    """Keys of distributed tables without their tenant column, and foreign keys between
    distributed tables that do not name it."""
    owned = tenant_owned()
    distributed = set(owned) - REFERENCE_TABLES
    keys = [
        f"{table}.{index} on ({', '.join(columns)})"
        for table, index, _primary, columns, _predicate in unique_keys()
        if table in distributed and owned[table] not in columns
    ]
    with connection.cursor() as cursor:
        cursor.execute(FOREIGN_KEYS)
        references = cursor.fetchall()
    return keys + [
        f"{table}.{name} -> {target} on ({', '.join(columns)})"
        for name, table, target, columns in references
        if table in distributed and target in distributed and owned[table] not in columns
    ]


def test_today_every_exception_is_the_documented_one():
    """Before the migration: the keys that leave the tenant out are every distributed table's
    ``id`` primary key and the documented exceptions, nothing else."""
    owned = tenant_owned()
    assert set(owned) >= REFERENCE_TABLES
    found: dict[tuple[str, str], str] = {}
    for table, index, primary, columns, predicate in unique_keys():
        if table not in owned or owned[table] in columns:
            continue
        if primary:
            assert columns == ["id"], (table, index, columns)
            continue
        found[(table, index)] = f"UNIQUE ({', '.join(columns)})" + (
            f" WHERE {predicate}" if predicate else ""
        )
    assert found == EXCEPTIONS_TODAY
    doc = DOC.read_text()
    for table, index in EXCEPTIONS_TODAY:
        assert f"`{table}` | `{index}`" in doc, (table, index)


def test_after_the_documented_migration_every_key_contains_the_tenant_column():
    owned = tenant_owned()
    sql = documented_sql()
    # every distributed table's primary key is rebuilt by the SQL (a new table must be added)
    for table, column in owned.items():
        rebuilt = f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey CASCADE, ADD PRIMARY KEY"
        if table not in REFERENCE_TABLES:
            assert f"{rebuilt} ({column}, id);" in sql, table
    assert breaking_the_rule()  # today's schema does break it
    links = links_between_distributed()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql)
        assert breaking_the_rule() == []
        assert links_between_distributed() == links
        # the reference table keeps its key unique across tenants
        with connection.cursor() as cursor:
            cursor.execute(CONSTRAINTS, ["tenants_apiclient"])
            assert ("tenants_apiclient_prefix_key", "UNIQUE (prefix)") in cursor.fetchall()
        transaction.set_rollback(True)
    assert breaking_the_rule()  # rolled back: the live schema is as it was
