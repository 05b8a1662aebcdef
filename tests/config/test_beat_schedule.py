"""What README's worker section says beat runs is what the schedule holds, each a task the
worker has registered."""

from __future__ import annotations

from django.conf import settings

from config.celery import app


def test_beat_runs_the_periodic_tasks_readme_names_and_the_worker_knows_them() -> None:
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks == {
        "ordering.sweep_outbox",
        "ordering.reclaim_stale_leases",
        "ordering.drain_idempotency_audits",
        "tenants.purge_expired_data",
        "ordering.reconcile_payments",
        "ordering.expire_unpaid_orders",
    }
    app.loader.import_default_modules()  # what a worker does as it starts
    assert tasks <= set(app.tasks)
