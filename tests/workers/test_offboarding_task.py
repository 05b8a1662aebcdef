"""The admin's "Offboard" action hands the work to a real Celery worker, which runs the job in
messages of a few steps each until the tenant is gone (issue 15 item 5)."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.test import Client

from ordering.models import TenantOffboarding
from tenants.models import Tenant
from tests.conftest import api_for, menu_for
from tests.privacy.conftest import tenant_keys
from tests.privacy.test_erase_diner import place
from tests.privacy.test_offboard_tenant import rows_of_tenant
from tests.workers.conftest import wait_for


@pytest.mark.django_db(transaction=True)
def test_the_admin_action_offboards_through_the_worker(
    celery_worker, make_tenant, settings, tmp_path
):
    settings.OFFBOARDING_EXPORT_DIR = tmp_path
    leaving, staying = make_tenant(slug="leaving"), make_tenant(slug="staying")
    for tenant in (leaving, staying):
        assert place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1").status_code == 201
    staying_rows = rows_of_tenant(staying.pk)
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", password="x-123456789"))
    staff.post(
        "/admin/tenants/tenant/",
        {
            "action": "offboard",
            ACTION_CHECKBOX_NAME: [str(leaving.pk)],
            "apply": "1",
            "typed": "leaving",
        },
    )
    job = TenantOffboarding.objects.get(tenant_ref=leaving.pk)
    wait_for(lambda: TenantOffboarding.objects.get(pk=job.pk).is_done, worker=celery_worker)
    assert "ordering.offboard_tenant" in celery_worker.log()  # the worker ran it, not this process
    assert not Tenant.objects.filter(pk=leaving.pk).exists()
    assert {label: rows for label, rows in rows_of_tenant(leaving.pk).items() if rows} == {}
    assert tenant_keys(str(leaving.pk)) == {}
    assert list(tmp_path.glob("leaving-*.zip"))
    assert rows_of_tenant(staying.pk) == staying_rows
