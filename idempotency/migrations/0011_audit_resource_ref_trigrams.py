"""A trigram index under the duplicate audits' resource search (PostgreSQL only).

The audits' admin finds an order's audits by any part of its URL (``resource_ref``, compared
as Django's ``icontains`` writes it: ``UPPER(resource_ref::text) LIKE UPPER('%…%')``). With no
index able to answer a match inside a value, every search read every audit: about 1 s over
2,000,000 audits, on each of the count, the drill-down and the page. A GIN index of that
expression's trigrams (``pg_trgm``, shipped with PostgreSQL and trusted: a database's owner may
create it) answers it. Built ``CONCURRENTLY``, so writes of audits go on while it builds (about
20 s over 2,000,000 audits), which needs a migration outside a transaction.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEX = "idempotency_audit_resource_ref_trgm"
CREATE = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON idempotency_duplicateaudit "
    "USING gin ((UPPER(resource_ref::text)) gin_trgm_ops)"
)


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        schema_editor.execute(CREATE)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("idempotency", "0010_staff_access_log_request_details")]

    operations = [migrations.RunPython(create, drop)]
