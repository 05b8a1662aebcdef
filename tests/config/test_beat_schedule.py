"""What README's worker section says beat runs is what the schedule holds, each a task the
worker has registered; the sweeps' settings are bounded."""

from __future__ import annotations

import pytest
from django.conf import settings

from config.celery import app
from tests.support.production import run_manage


def test_beat_runs_the_periodic_tasks_readme_names_and_the_worker_knows_them() -> None:
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks == {
        "ordering.sweep_outbox",
        "ordering.reclaim_stale_leases",
        "ordering.drain_idempotency_audits",
        "tenants.purge_expired_data",
        "ordering.reconcile_payments",
        "ordering.expire_unpaid_orders",
        "ordering.resend_capture_refunds",
        "ordering.resume_stalled_offboardings",
    }
    app.loader.import_default_modules()  # what a worker does as it starts
    assert tasks <= set(app.tasks)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UNPAID_ORDER_EXPIRY_SECONDS", "99999999999"),
        ("UNPAID_ORDER_EXPIRY_SECONDS", "-1"),
        ("PENDING_PAYMENT_EXPIRY_SECONDS", "-1"),
        ("PAYMENT_RECONCILE_MAX_AGE_SECONDS", "half an hour"),
        ("PAYMENT_RECONCILE_BATCH", "0"),
    ],
)
def test_a_sweep_s_setting_out_of_range_stops_the_server_from_starting(name, value):
    """Read as given, 99999999999 seconds made every sweep fail on the date arithmetic."""
    done = run_manage("check", env={"DEBUG": "1", name: value})
    assert done.returncode != 0
    assert f"{name} must be" in done.stderr
