"""Beat sends the retention purge as it starts: a beat restarted more often than the purge's
interval, on a schedule file that does not outlive it, still purges. (A module of its own: the
worker of ``test_retention_beat.py`` purges every second while its module runs.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import DinerSession
from tests.support.auth import diner_token
from tests.workers.conftest import running_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_beat_purges_as_it_starts_not_only_an_interval_later(tmp_path, make_tenant):
    """Beat first sends an interval task one interval after it starts: with the default hour
    and a schedule file that does not outlive the process (``make run`` makes a fresh one each
    time, as does a container), a beat restarted within the hour never purged, and nothing
    was erased after its retention. The purge is now sent as beat starts, then every hour."""
    # given an expired diner session and a live one
    tenant = make_tenant("restarted-often")
    diner_token(tenant, "gone")
    diner_token(tenant, "here")
    DinerSession.objects.filter(diner_id="gone").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    # when a worker with embedded beat starts on a fresh schedule, the purge an hour apart
    with running_worker(
        tmp_path,
        extra_args=("--beat", "--schedule", str(tmp_path / "celerybeat-schedule")),
        extra_env={"RETENTION_PURGE_SECONDS": "3600"},
    ) as worker:
        # then the expired session goes without waiting for the hour
        wait_for(lambda: not DinerSession.objects.filter(diner_id="gone").exists(), worker=worker)
    assert list(DinerSession.objects.values_list("diner_id", flat=True)) == ["here"]
