"""The migration path: keys of the former kind "diner app" become publishable keys."""

from __future__ import annotations

import pytest

from tests.support.migrations import migrate_to

BEFORE = [("tenants", "0002_tenant_write_rate_per_minute")]
AFTER = [("tenants", "0003_publishable_keys_diner_sessions_write_ceiling")]


@pytest.mark.django_db(transaction=True)
def test_diner_app_keys_become_publishable_and_merchant_keys_stay(back_to_latest: None) -> None:
    old = migrate_to(BEFORE)
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="old", name="Old")
    clients = old.get_model("tenants", "ApiClient").objects
    app = clients.create(tenant=tenant, name="app", kind="diner_app", prefix="p1", secret_hash="x")
    pos = clients.create(tenant=tenant, name="pos", kind="merchant", prefix="p2", secret_hash="y")

    new = migrate_to(AFTER).get_model("tenants", "ApiClient")
    assert new.objects.get(pk=app.pk).kind == "publishable"
    assert new.objects.get(pk=pos.pk).kind == "merchant"
