"""An index of the duplicate audits by tenant and principal, for one diner's audits.

A diner's copy of their data (its bound's count on the dashboard, then the copy) and an
erasure find the diner's audits by tenant and principal (``idempotency.erasure
.principal_audits``). Through the tenant's index alone, each compared every audit the tenant
keeps (30 days by default, up to 365) to find the few of one diner. Built ``CONCURRENTLY`` on
PostgreSQL, so audits are written while it builds (the migration runs outside a transaction);
a plain index on the SQLite demo. A build that fails leaves an invalid index of this name:
``DROP INDEX CONCURRENTLY`` it before ``migrate`` runs again.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

INDEX = models.Index(fields=["tenant_key", "principal"], name="audit_tenant_principal")
TABLE = "idempotency_duplicateaudit"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX.name} "
            f"ON {TABLE} (tenant_key, principal)"
        )
    else:
        schema_editor.add_index(apps.get_model("idempotency", "DuplicateAudit"), INDEX)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    else:
        schema_editor.remove_index(apps.get_model("idempotency", "DuplicateAudit"), INDEX)


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("idempotency", "0012_outcome_count_hour")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(create, drop)],
            state_operations=[migrations.AddIndex(model_name="duplicateaudit", index=INDEX)],
        )
    ]
