"""The retention purge runs by itself: a real worker with embedded beat (as ``make run``
starts it) fires ``tenants.purge_expired_data`` on its schedule and expired rows disappear,
with no cron and nobody sending the task."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import DuplicateAudit
from tenants.models import DinerSession, RetentionTally
from tests.support.auth import diner_token
from tests.workers.conftest import CeleryWorker, running_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def worker_with_beat(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    log_dir = tmp_path_factory.mktemp("celery-beat")
    with running_worker(
        log_dir,
        extra_args=("--beat", "--schedule", str(log_dir / "celerybeat-schedule")),
        extra_env={"RETENTION_PURGE_SECONDS": "1"},
    ) as worker:
        yield worker


def test_beat_runs_the_purge_on_a_real_worker(worker_with_beat, make_tenant):
    # given a tenant keeping audits one day, with an old audit, a fresh one and an
    # expired and a live diner session
    tenant = make_tenant("short-memory", audit_retention_days=1)
    now = timezone.now()
    for key, age in (("old", timedelta(days=2)), ("fresh", timedelta(hours=1))):
        DuplicateAudit.objects.create(
            tenant_key=str(tenant.pk), endpoint="POST api/v1/orders/", key=key,
            outcome="HIT", at=now - age,
        )  # fmt: skip
    diner_token(tenant, "gone")
    diner_token(tenant, "here")
    DinerSession.objects.filter(diner_id="gone").update(expires_at=now - timedelta(seconds=1))

    # then within a few beats the worker purged the expired rows, and only those
    def purged() -> bool:
        return (
            not DuplicateAudit.objects.filter(key="old").exists()
            and not DinerSession.objects.filter(diner_id="gone").exists()
        )

    wait_for(purged, worker=worker_with_beat)
    assert list(DuplicateAudit.objects.values_list("key", flat=True)) == ["fresh"]
    assert list(DinerSession.objects.values_list("diner_id", flat=True)) == ["here"]
    tallies = dict(RetentionTally.objects.values_list("kind", "rows_purged"))
    assert tallies["duplicate_audits"] >= 1 and tallies["diner_sessions"] >= 1
    # and the schedule sends it too (beat also sends it as it starts, which may have purged
    # these rows before the schedule's first turn)
    sent = "Scheduler: Sending due task purge-expired-data (tenants.purge_expired_data)"
    wait_for(lambda: sent in worker_with_beat.log(), worker=worker_with_beat)
    log = worker_with_beat.log()
    assert "Task tenants.purge_expired_data[" in log and "succeeded" in log
