"""The fence that closes a leaving tenant's tables: once its offboarding has begun, PostgreSQL
refuses every write of a row of it, whoever makes it.

Suspending a tenant refuses its credentials, but only to requests that authenticate after it:
a request that passed authentication just before (or a worker's task, or a member's dashboard
form) could still commit a row of the tenant while its offboarding exported and deleted it,
and that row was deleted without ever being in the archive, or changed after its export. A
check in Python before the write would race the same way. So the database arbitrates:

- every table with a foreign key to the tenant (found from the schema, so a table added later
  is fenced too, :func:`tenant_tables`) has a ``BEFORE INSERT OR UPDATE`` trigger that takes
  ``FOR KEY SHARE`` on the row's tenant (the lock every insert's foreign key check takes
  anyway) and refuses the write, SQLSTATE :data:`FENCE_SQLSTATE`, when the tenant's status is
  ``offboarding``;
- :func:`close` locks the tenant row ``FOR UPDATE``, which waits for every transaction holding
  that lock (one that wrote a row of the tenant) to end, then sets the status. A transaction
  that writes after that waits for the closing transaction and then reads the new status.

So every write of the tenant either committed before the suspension (and the export, which
comes after it, holds it) or is refused. Deletes are not fenced: the offboarding deletes. The
triggers are (re)installed after every ``migrate`` (:func:`install`), on PostgreSQL only: the
embedded SQLite demo has one process, and no concurrent writer to fence.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections
from django.db.models import ForeignKey, Model, Q

from tenants.models import Tenant

FENCE_SQLSTATE = "OFB01"
FUNCTION = "tenant_write_fence"
TRIGGER_PREFIX = "tenant_write_fence_"

_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $fence$
DECLARE
    owner bigint := (to_jsonb(NEW) ->> TG_ARGV[0])::bigint;
    owner_status text;
BEGIN
    IF owner IS NULL THEN
        RETURN NEW;
    END IF;
    SELECT status INTO owner_status FROM {{tenants}} WHERE id = owner FOR KEY SHARE;
    IF owner_status = '{{offboarding}}' THEN
        RAISE EXCEPTION 'tenant % is being offboarded: its rows are no longer written', owner
            USING ERRCODE = '{FENCE_SQLSTATE}';
    END IF;
    RETURN NEW;
END
$fence$
"""


def tenant_tables() -> list[type[Model]]:
    """Every model with a foreign key to Tenant (Tenant itself excluded)."""
    return [
        model
        for model in apps.get_models()
        if model is not Tenant and _tenant_columns(model) and not model._meta.proxy
    ]


def _tenant_columns(model: type[Model]) -> list[str]:
    return [
        f.column
        for f in model._meta.concrete_fields
        if isinstance(f, ForeignKey) and f.related_model is Tenant
    ]


def fenced_columns() -> dict[str, list[str]]:
    """Table name -> its columns that name a tenant: what :func:`install` fences."""
    return {model._meta.db_table: _tenant_columns(model) for model in tenant_tables()}


def install(*, using: str = "default", **_: Any) -> None:
    """Create or replace the function, and add the triggers missing (a ``post_migrate``
    receiver: run after every ``migrate``, cheap when everything is in place). Only tables
    that exist are fenced: a ``migrate`` of one app (``migrate tenants`` on a new database),
    or back to before a table, leaves other models' tables uncreated, and failed on them; the
    ``migrate`` that creates a table fences it."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    quote = connection.ops.quote_name
    function = _FUNCTION_SQL.replace("{tenants}", quote(Tenant._meta.db_table)).replace(
        "{offboarding}", Tenant.Status.OFFBOARDING
    )
    with connection.cursor() as cursor:
        cursor.execute(function)
        cursor.execute(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname LIKE %s",
            [TRIGGER_PREFIX + "%"],
        )
        present = set(cursor.fetchall())
        tables = set(connection.introspection.table_names(cursor))
        for table, columns in fenced_columns().items():
            if table not in tables:
                continue
            for column in columns:
                name = TRIGGER_PREFIX + column
                if (table, name) in present:
                    continue
                cursor.execute(
                    f"CREATE TRIGGER {quote(name)} BEFORE INSERT OR UPDATE ON {quote(table)} "
                    f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}('{column}')"
                )


def close(tenant_id: int) -> None:
    """Lock the tenant's row until the caller's transaction ends, once every transaction that
    wrote a row of the tenant has ended. Call it first in the transaction that sets the status
    ``offboarding``: from its commit on, every write of the tenant's rows is refused."""
    Tenant.objects.select_for_update().filter(pk=tenant_id).values_list("pk").first()


def writable(tenant_field: str = "tenant") -> Q:
    """Rows whose tenant is not being offboarded: what a sweep across tenants (the outbox's
    resends, reconciliation, the unpaid expiry, the retention purge) may pick. A row of a
    leaving tenant cannot be written, so the sweep's own bookkeeping of it failed, the row
    stayed first in the sweep's order, and every run stopped on it: no other tenant's row was
    swept until the offboarding deleted it. Its offboarding deletes it instead."""
    return ~Q(**{f"{tenant_field}__status": Tenant.Status.OFFBOARDING})


def refused_by_fence(exc: BaseException) -> bool:
    """Whether ``exc`` is the fence refusing a write of a tenant being offboarded."""
    return (
        isinstance(exc, DatabaseError)
        and getattr(exc.__cause__, "sqlstate", None) == FENCE_SQLSTATE
    )
