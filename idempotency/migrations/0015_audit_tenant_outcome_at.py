"""An index of the duplicate audits by tenant and outcome, newest first.

A tenant's newest audits of some outcomes (``idempotency.reports.latest_audits``: the host's
page of replayed duplicates and of refusals) were read by walking the index of every tenant's
audits by time and dropping the rows of other tenants and outcomes: a tenant with no audit of
an outcome had every audit of every tenant read (30 days by default, up to 365) at each view.
On PostgreSQL, statistics of the tenants' outcomes together (``audit_tenant_outcome``, their
most common pairs) go with it: counted apart, a large tenant with none of an outcome looked as
if it had thousands, and walking every tenant's audits by time looked cheaper than this index.
Built ``CONCURRENTLY`` on PostgreSQL, so audits are written while it builds (the migration runs
outside a transaction); a plain index on the SQLite demo. A build that fails leaves an invalid
index of this name: ``DROP INDEX CONCURRENTLY`` it before ``migrate`` runs again.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

INDEX = models.Index(fields=["tenant_key", "outcome", "-at", "-id"], name="audit_tenant_outcome_at")
TABLE = "idempotency_duplicateaudit"
STATISTICS = "audit_tenant_outcome"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX.name} "
            f"ON {TABLE} (tenant_key, outcome, at DESC, id DESC)"
        )
        schema_editor.execute(
            f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (mcv) ON tenant_key, outcome FROM {TABLE}"
        )
    else:
        schema_editor.add_index(apps.get_model("idempotency", "DuplicateAudit"), INDEX)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    else:
        schema_editor.remove_index(apps.get_model("idempotency", "DuplicateAudit"), INDEX)


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("idempotency", "0014_staff_access_actor")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(create, drop)],
            state_operations=[migrations.AddIndex(model_name="duplicateaudit", index=INDEX)],
        )
    ]
