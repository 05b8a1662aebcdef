"""An upgrade migrates the database while the release before it still serves (a rolling
deploy): the previous release's writes must keep working against the new schema.

A column a migration adds NOT NULL is one the previous release's INSERTs do not name. Django
drops the default it adds the column with, so without a database default (``db_default``)
every such INSERT fails on the NOT NULL constraint until the last old process is gone: a
payment written by the release before ``ordering 0018`` was a 500 on every pay.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader

from ordering.models import Order, Payment
from tenants.models import Tenant

OUR_APPS = ("ordering", "tenants", "idempotency")


def _not_null_columns_added_later() -> list[tuple[str, str, str]]:
    """(migration, table, column) of every column a migration of ours adds NOT NULL to a
    table an earlier migration created."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    found = []
    for (app, name), migration in sorted(loader.disk_migrations.items()):
        if app not in OUR_APPS:
            continue
        created = {
            op.name_lower for op in migration.operations if isinstance(op, migrations.CreateModel)
        }
        for op in migration.operations:
            if not isinstance(op, migrations.AddField) or op.model_name in created:
                continue
            if op.field.null or op.field.many_to_many:
                continue
            model = loader.project_state((app, name)).apps.get_model(app, op.model_name)
            column = model._meta.get_field(op.name).column
            found.append((f"{app}.{name}", model._meta.db_table, column))
    return found


ADDED_LATER = _not_null_columns_added_later()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("migration", "table", "column"),
    ADDED_LATER,
    ids=[f"{table}.{column}" for _, table, column in ADDED_LATER],
)
def test_a_column_added_not_null_keeps_a_database_default(
    migration: str, table: str, column: str
) -> None:
    """The previous release's INSERT, which does not name the column, still succeeds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_default FROM information_schema.columns "
            "WHERE table_name = %s AND column_name = %s",
            [table, column],
        )
        (default,) = cursor.fetchone()
    assert default is not None, f"{migration} adds {table}.{column} NOT NULL with no default"


def test_the_columns_found_include_the_payment_s_unwanted_capture() -> None:
    assert ("ordering.0018_unwanted_capture_refunds", "ordering_payment", "unwanted_capture") in (
        ADDED_LATER
    )


@pytest.mark.django_db
def test_the_release_before_unwanted_capture_still_pays(tenant: Tenant) -> None:
    """A payment written through the models of ``ordering 0017`` (the release before the
    column) is written against today's schema, and is not an unwanted capture."""
    order = Order.all_tenants.create(id=1, tenant=tenant, subtotal=10, total=10)
    loader = MigrationLoader(None, ignore_no_migrations=True)
    before = loader.project_state(("ordering", "0017_sales_day_refunds")).apps
    old_payment = before.get_model("ordering", "Payment")._base_manager.create(
        tenant_id=tenant.pk,
        order_id=order.pk,
        provider="simulated",
        provider_txn_id="txn-old-release",
        method="card",
        amount=Decimal("10.00"),
        currency="EUR",
        status="pending",
    )
    assert Payment.all_tenants.get(pk=old_payment.pk).unwanted_capture is False
