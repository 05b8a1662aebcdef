"""The migration path: keys of the former kind "diner app" become publishable keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("tenants", "0002_tenant_write_rate_per_minute")]
AFTER = [("tenants", "0003_publishable_keys_diner_sessions_write_ceiling")]


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    """Leave the schema as every later test expects it: every app's latest migration (moving
    tenants back also unapplied the migrations of other apps that depend on later ones)."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_diner_app_keys_become_publishable_and_merchant_keys_stay(back_to_latest: None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="old", name="Old")
    clients = old.get_model("tenants", "ApiClient").objects
    app = clients.create(tenant=tenant, name="app", kind="diner_app", prefix="p1", secret_hash="x")
    pos = clients.create(tenant=tenant, name="pos", kind="merchant", prefix="p2", secret_hash="y")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)

    new = executor.loader.project_state(AFTER).apps.get_model("tenants", "ApiClient")
    assert new.objects.get(pk=app.pk).kind == "publishable"
    assert new.objects.get(pk=pos.pk).kind == "merchant"
