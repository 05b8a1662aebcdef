"""An offboarding killed half-way finishes when run again, and two runners of one job take
turns (issue 15 item 5).

The command runs in a process of its own, one row per step. The test holds a row lock on the
tenant's orders, so the process commits the steps before the orders (order lines, transitions,
payments, …) and then waits on that lock: a known point half-way, found by asking PostgreSQL
who waits, not by timing. It is killed there with SIGKILL, the lock is released, and the
command is run again.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from idempotency.core.keys import redis_key_from_digest
from idempotency.models import IdempotencyRecord
from ordering.models import Order, OrderLine, TenantOffboarding
from ordering.privacy.offboarding import (
    OffboardingRefused,
    run_offboarding,
    stalled_jobs,
    start_offboarding,
    step,
)
from tenants.models import Tenant
from tests.conftest import use_topology
from tests.privacy.conftest import tenant_keys
from tests.privacy.test_offboard_tenant import busy_tenant, rows_of_tenant
from tests.support.redis_nodes import RedisNode

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # statistics are cached per transaction
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_killed_offboarding_finishes_when_run_again(make_tenant, tmp_path, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    tenant = make_tenant(slug="leaving")
    busy_tenant(tenant)
    lines_before = OrderLine.all_tenants.filter(tenant=tenant).count()
    archive = tmp_path / "leaving.zip"
    env = {
        **os.environ,
        "DEBUG": "1",
        "APP_DB_NAME": settings.DATABASES["default"]["NAME"],
        "DINER_SESSION_STATE_CACHE_SECONDS": "0.05",
        "OFFBOARDING_DRAIN_SECONDS": "0",
    }
    command = [sys.executable, "manage.py", "offboard_tenant", "--noinput", "leaving"]
    command += ["--export", str(archive), "--batch-size", "1"]
    # given the command half-way, waiting for the orders we hold locked
    with transaction.atomic():
        list(Order.all_tenants.select_for_update().filter(tenant=tenant))
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while waiting_on_a_lock() == 0:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the command never reached the orders"
                time.sleep(0.05)
        finally:
            # when it is killed there
            process.send_signal(signal.SIGKILL)
            process.wait(30)
    job = TenantOffboarding.objects.get(tenant_ref=tenant.pk)
    assert job.phase == TenantOffboarding.Phase.TABLES and not job.is_done
    assert OrderLine.all_tenants.filter(tenant=tenant).count() < lines_before
    assert Order.all_tenants.filter(tenant=tenant).count() == 3
    batches_before = job.batches
    # then running it again finishes the same job, and nothing of the tenant is left
    out = io.StringIO()
    call_command("offboard_tenant", "--noinput", "leaving", "--export", str(archive), stdout=out)
    job.refresh_from_db()
    assert job.is_done and job.batches > batches_before
    assert TenantOffboarding.objects.filter(tenant_ref=tenant.pk).count() == 1
    assert {label: rows for label, rows in rows_of_tenant(tenant.pk).items() if rows} == {}
    assert tenant_keys(str(tenant.pk)) == {}
    assert archive.exists() and job.export_sha256


@pytest.mark.django_db(transaction=True)
def test_two_runners_of_one_job_take_turns(make_tenant, tmp_path, settings):
    # given a job, and what there is to remove
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    tenant = make_tenant(slug="leaving")
    busy_tenant(tenant)
    rows = sum(map(len, rows_of_tenant(tenant.pk).values())) - 1  # the tenant row: no batch
    records = IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk))
    entries = {
        redis_key_from_digest(tenant=r.tenant_key, scope=r.scope, digest=r.key) for r in records
    }
    keys = len({k.decode() for k in tenant_keys(str(tenant.pk))} - entries)  # the rest: by SCAN
    job = start_offboarding(
        tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t", batch_size=2
    )
    # when two threads (two connections) run it at once, as a twice-delivered task would
    start, results, errors = threading.Barrier(2), [], []

    def runner() -> None:
        try:
            start.wait(10)
            results.append(run_offboarding(job.pk))
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # then both end on the finished job, and every row and key was counted exactly once
    assert errors == [] and [r.is_done for r in results] == [True, True]
    job.refresh_from_db()
    assert job.counts.pop("redis_keys") == keys
    assert sum(job.counts.values()) == rows
    assert {label: found for label, found in rows_of_tenant(tenant.pk).items() if found} == {}


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_open_one_job(make_tenant, tmp_path):
    tenant = make_tenant(slug="leaving")
    start, jobs, errors = threading.Barrier(8), [], []

    def request() -> None:
        try:
            start.wait(10)
            jobs.append(
                start_offboarding(
                    tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t"
                ).pk
            )
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(jobs) == 8 and len(set(jobs)) == 1
    assert TenantOffboarding.objects.filter(tenant_ref=tenant.pk).count() == 1


@pytest.mark.django_db(transaction=True)
def test_another_path_given_while_the_export_runs_is_refused(make_tenant, tmp_path):
    # given a suspended job whose export step is running (it holds the job's row lock)
    tenant = make_tenant(slug="leaving")
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=1)
    asked, outcome = threading.Event(), []

    def export_step() -> None:
        try:
            with transaction.atomic():
                TenantOffboarding.objects.select_for_update().get(pk=job.pk)
                asked.set()
                deadline = time.monotonic() + 30
                while not waiting_on_a_lock() and time.monotonic() < deadline:
                    time.sleep(0.02)
                step(job.pk)  # the export, under the lock already held
        finally:
            connections.close_all()

    def second_request() -> None:
        asked.wait(30)
        try:
            outcome.append(
                start_offboarding(tenant=tenant, export_path=tmp_path / "b.zip", requested_by="t")
            )
        except OffboardingRefused as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    # when staff start it again with another archive path meanwhile (the admin action twice)
    threads = [threading.Thread(target=export_step), threading.Thread(target=second_request)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # then the new path is refused, and the job still names the archive it wrote
    job.refresh_from_db()
    assert job.phase == TenantOffboarding.Phase.ENGINE
    assert (tmp_path / "a.zip").exists() and not (tmp_path / "b.zip").exists()
    assert job.export_path == str(tmp_path / "a.zip")
    assert len(outcome) == 1 and isinstance(outcome[0], OffboardingRefused)


@pytest.mark.django_db(transaction=True)
def test_a_job_given_another_path_after_a_killed_export_leaves_no_partial_archive(
    make_tenant, tmp_path, settings
):
    """An export killed half-way leaves its partial archive beside its path (diners' ids,
    notes and contact details); run again with that path it is cleared, but given another
    path (the admin's action names a new one each time) the job went on and the partial file
    stayed for good, where nobody hands it over or deletes it."""
    tenant = make_tenant(slug="leaving")
    busy_tenant(tenant)
    first, second = tmp_path / "first" / "leaving.zip", tmp_path / "second" / "leaving.zip"
    env = {
        **os.environ,
        "DEBUG": "1",
        "APP_DB_NAME": settings.DATABASES["default"]["NAME"],
        "OFFBOARDING_DRAIN_SECONDS": "0",
    }
    command = [
        sys.executable,
        "manage.py",
        "offboard_tenant",
        "--noinput",
        "leaving",
        "--export",
        str(first),
    ]
    # given the export half-written, waiting to read the coupons we hold locked, and killed
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("LOCK TABLE ordering_coupon IN ACCESS EXCLUSIVE MODE")
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while waiting_on_a_lock() == 0:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the export never reached the coupons"
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
    partial = first.with_name(f".{first.name}.partial")
    assert partial.exists() and TenantOffboarding.objects.get().phase == "export"
    # when the offboarding is run again with another path, to its end
    call_command(
        "offboard_tenant", "--noinput", "leaving", "--export", str(second), stdout=io.StringIO()
    )
    # then no partial archive is left beside the first path
    assert TenantOffboarding.objects.get().is_done and second.exists()
    assert list(first.parent.iterdir()) == []


@pytest.mark.fault
@pytest.mark.django_db(transaction=True)
def test_a_job_stopped_by_redis_going_away_is_resumed_by_the_beat_sweep(
    make_tenant, tmp_path, settings
):
    """Redis gone mid-step (restarted, failed over, frozen past its timeout) is the outage the
    beat's sweep is there for, not an error staff must see to (red when every error kept the
    job out of the sweep: one Redis read timing out in the engine phase left the restaurant
    fenced and half-erased until someone opened the admin)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    settings.OFFBOARDING_DRAIN_SECONDS = 0
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        tenant = make_tenant(slug="leaving")
        busy_tenant(tenant)
        job = start_offboarding(
            tenant=tenant, export_path=tmp_path / "leaving.zip", requested_by="t"
        )
        while TenantOffboarding.objects.get(pk=job.pk).phase != TenantOffboarding.Phase.ENGINE:
            step(job.pk)
        # when Redis goes away as the engine's records are removed with their entries
        node.client().save()
        node.stop()
        with pytest.raises(RedisError):
            run_offboarding(job.pk)
        node.start()
        # then, once nothing has moved the job for the sweep's while, the sweep takes it up
        assert stalled_jobs() == []
        TenantOffboarding.objects.filter(pk=job.pk).update(
            updated_at=timezone.now()
            - timedelta(seconds=settings.OFFBOARDING_STALLED_AFTER_SECONDS + 1)
        )
        assert stalled_jobs() == [job.pk]
        # and running it finishes it
        assert run_offboarding(job.pk).is_done
        assert not Tenant.objects.filter(pk=tenant.pk).exists()
        assert {label: rows for label, rows in rows_of_tenant(tenant.pk).items() if rows} == {}
        assert tenant_keys(str(tenant.pk)) == {}
    finally:
        node.remove()
