"""The admin's "Offboard" action hands the work to a real Celery worker, which runs the job in
messages of a few steps each until the tenant is gone (issue 15 item 5)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from ordering.background.tasks import resume_stalled_offboardings
from ordering.models import TenantOffboarding
from ordering.privacy.offboarding import (
    WAITING_FOR_MONEY,
    run_offboarding,
    stalled_jobs,
    start_offboarding,
    step,
)
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


def _quiet_for(job: TenantOffboarding, minutes: int) -> None:
    """The job as a lost message leaves it: nothing moved it for ``minutes``."""
    moved = timezone.now() - timedelta(minutes=minutes)
    TenantOffboarding.objects.filter(pk=job.pk).update(updated_at=moved)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_message_was_lost_is_resumed_by_the_beat_sweep(
    celery_worker, make_tenant, settings, tmp_path
):
    """Each message of an offboarding sends the next: one the broker lost (a worker killed,
    Redis restarted empty) stopped the job for good, while it said it was under way. The
    beat's sweep sends such a job again, and the worker finishes it; a job moved recently, or
    stopped by an error that staff must see to, is left alone."""
    leaving = make_tenant(slug="leaving")
    assert place(api_for(leaving, diner="zoe"), menu_for(leaving), "k1").status_code == 201
    lost = start_offboarding(tenant=leaving, export_path=tmp_path / "a.zip", requested_by="t")
    _quiet_for(lost, minutes=11)  # its first message never ran
    failed = start_offboarding(
        tenant=make_tenant(slug="failing"), export_path=tmp_path / "b.zip", requested_by="t"
    )
    TenantOffboarding.objects.filter(pk=failed.pk).update(last_error="OSError: disk full")
    _quiet_for(failed, minutes=60)
    recent = start_offboarding(
        tenant=make_tenant(slug="recent"), export_path=tmp_path / "c.zip", requested_by="t"
    )

    assert resume_stalled_offboardings() == 1

    wait_for(lambda: TenantOffboarding.objects.get(pk=lost.pk).is_done, worker=celery_worker)
    assert not Tenant.objects.filter(pk=leaving.pk).exists()
    assert {label: rows for label, rows in rows_of_tenant(leaving.pk).items() if rows} == {}
    for untouched in (failed, recent):
        assert TenantOffboarding.objects.get(pk=untouched.pk).phase == "suspend"


@pytest.mark.django_db
def test_a_job_waiting_for_the_restaurant_s_money_is_resumed_once_quiet(make_tenant, tmp_path):
    job = start_offboarding(
        tenant=make_tenant(slug="waiting"), export_path=tmp_path / "w.zip", requested_by="t"
    )
    TenantOffboarding.objects.filter(pk=job.pk).update(
        last_error=f"{WAITING_FOR_MONEY}: 1 payment awaiting the provider; run it again later"
    )
    _quiet_for(job, minutes=5)
    assert stalled_jobs() == []  # its own message looks again every minute

    _quiet_for(job, minutes=11)
    assert stalled_jobs() == [job.pk]


@pytest.mark.django_db(transaction=True)
def test_a_job_continued_past_its_error_no_longer_shows_it_and_is_resumed_once_quiet(
    make_tenant, tmp_path
):
    """Why a run stopped is kept on the job until a run gets past it (red when the error
    stayed: the admin showed a job moving on as stopped on it, and the beat's sweep, taking
    it for one staff must see to, never sent again a message of it the broker lost)."""
    tenant = make_tenant(slug="continued")
    assert place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1").status_code == 201
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    job = start_offboarding(tenant=tenant, export_path=blocked / "a.zip", requested_by="t")
    with pytest.raises(OSError):
        run_offboarding(job.pk)
    job.refresh_from_db()
    assert job.phase == "export"
    assert job.last_error.startswith("FileExistsError"), job.last_error
    # when staff give another path and continue it, and its export goes through
    start_offboarding(tenant=tenant, export_path=tmp_path / "b.zip", requested_by="t")
    step(job.pk)
    # then the job no longer says it stopped, and a message of it lost later is sent again
    job.refresh_from_db()
    assert (job.phase, job.last_error) == ("engine", "")
    _quiet_for(job, minutes=11)
    assert stalled_jobs() == [job.pk]
