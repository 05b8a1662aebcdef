"""Offboarding a tenant (issue 15 item 5) on one Redis node, three shards and a Redis Cluster.

Two tenants with the same kind of activity (orders with a coupon and a note, replays, a
merchant's move, tokens, rate counters, a payment, a dead letter without a tenant column, a
diner erasure log); the first is offboarded in batches of three. Afterwards no table the tenant
owned (found from the schema, not listed) and no Redis key under its hash tag on any node holds
anything of it, its archive holds its data, and the second tenant's rows, keys and replays are
exactly what they were.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Model
from django.test import Client
from rest_framework.test import APIClient

from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import drain_audits
from ordering.models import DeadLetter, Order, Payment, TenantOffboarding
from ordering.privacy.diners import erase_diner
from ordering.privacy.offboarding import run_offboarding, start_offboarding
from ordering.privacy.tenant_tables import engine_tables, rows_of, tenant_tables
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.conftest import api_for, menu_for
from tests.dashboard.factories import make_merchant
from tests.privacy.conftest import dropped_by_another_process, tenant_keys
from tests.privacy.test_erase_diner import place
from tests.support.terminal import Terminal

PROJECT_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def busy_tenant(tenant: Tenant) -> dict[str, Any]:
    """A tenant with a bit of everything; returns a diner's client and a first answer."""
    from ordering.models import Coupon

    menu = menu_for(tenant)
    Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="TEN", kind=Coupon.Kind.PERCENT, value=Decimal("10")
    )
    api = api_for(tenant, diner="zoe")
    first = place(api, menu, "k1", note="call me")
    assert first.status_code == 201
    coupon_order = api.post(
        "/api/v1/orders/",
        {
            "items": [{"dish_id": menu["pasta"].pk, "quantity": 2}],
            "payment_method": "card",
            "coupon_code": "TEN",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="k2",
    )
    assert coupon_order.status_code == 201
    stores.local_cache().clear()
    assert place(api, menu, "k1", note="call me").content == first.content
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    order_id = coupon_order.json()["id"]
    moved = merchant.post(
        f"/api/v1/orders/{order_id}/transition/", {"to": "CANCELLED"}, format="json"
    )
    assert moved.status_code == 200
    assert api.post("/api/v1/idempotency-tokens/", {"count": 3}, format="json").status_code == 201
    order = Order.all_tenants.get(pk=first.json()["id"])
    Payment.objects.for_tenant(tenant).create(
        tenant=tenant,
        order=order,
        provider="simulated",
        provider_txn_id=f"tx-{order.pk}",
        method="card",
        amount=order.total,
        status=Payment.Status.SUCCEEDED,  # settled: an offboarding waits for money that moves
    )
    DeadLetter.objects.create(
        tenant=None, order=order, key=f"dl-{order.pk}", task="t", payload={}, error="e", attempts=3
    )
    guest = api_for(tenant, diner="yan")
    assert place(guest, menu, "k1").status_code == 201
    erase_diner(tenant=tenant, diner_id="yan", requested_by="staff:alice")
    drain_audits()
    return {"api": api, "menu": menu, "first": first}


def rows_of_tenant(tenant_id: int) -> dict[str, list[tuple]]:
    """Every row the tenant owns, table by table, as tuples of all column values."""
    found: dict[str, list[tuple]] = {}
    models: list[type[Model]] = [*tenant_tables(), *engine_tables(), Tenant]
    for model in models:
        if model is Tenant:
            rows = Tenant.objects.filter(pk=tenant_id)
        elif model in engine_tables():
            rows = model._base_manager.filter(tenant_key=str(tenant_id))
        else:
            rows = model._base_manager.filter(rows_of(model, tenant_id))
        found[model._meta.label] = sorted(map(repr, rows.order_by("pk").values_list()))
    return found


def replay_keys(tenant_id: int) -> dict[bytes, bytes]:
    """The tenant's idempotency entries and tokens (rate counters expire within a minute)."""
    return {k: v for k, v in tenant_keys(str(tenant_id)).items() if k.startswith(b"idem:")}


def test_offboarding_leaves_nothing_and_touches_no_one_else(
    topology, make_tenant, settings, tmp_path
):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    # given two busy tenants
    leaving, staying = make_tenant(), make_tenant()
    busy_tenant(leaving)
    kept = busy_tenant(staying)
    leaving_id, key = leaving.pk, issue_api_key(tenant=leaving, name="app")[1]
    staying_rows, staying_keys = rows_of_tenant(staying.pk), replay_keys(staying.pk)
    assert sum(map(len, rows_of_tenant(leaving_id).values())) > 20
    assert len(tenant_keys(str(leaving_id))) > 5
    # when the first is offboarded, three rows or keys per step
    archive = tmp_path / "leaving.zip"
    out = io.StringIO()
    call_command(
        "offboard_tenant",
        "--noinput",
        leaving.slug,
        "--export",
        str(archive),
        "--batch-size",
        "3",
        stdout=out,
    )
    # then nothing of it is left in any table or on any Redis node
    assert {label: rows for label, rows in rows_of_tenant(leaving_id).items() if rows} == {}
    assert tenant_keys(str(leaving_id)) == {}
    # its archive, readable by its owner only (diners' contact details), holds its orders,
    # menu, coupons and payments
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    with zipfile.ZipFile(archive) as zipped:
        manifest = json.loads(zipped.read("manifest.json"))
        orders = json.loads(zipped.read("orders.json"))
        assert manifest["files"]["orders.json"] == len(orders) == 3
        assert {o["fields"]["tenant"] for o in orders} == {leaving_id}
        assert len(json.loads(zipped.read("menu.json"))) == 2
        assert [c["fields"]["code"] for c in json.loads(zipped.read("coupons.json"))] == ["TEN"]
        assert len(json.loads(zipped.read("payments.json"))) == 1
    job = TenantOffboarding.objects.get(tenant_ref=leaving_id)
    assert job.is_done and job.batches > 10 and job.counts["redis_keys"] > 5
    assert f"removed {json.dumps(job.counts, sort_keys=True)}" in out.getvalue()
    # the other tenant is exactly as it was and replays byte for byte; the key opens nothing
    assert rows_of_tenant(staying.pk) == staying_rows
    assert replay_keys(staying.pk) == staying_keys
    gone = APIClient()
    gone.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert gone.get("/api/v1/menu/").status_code == 401
    stores.local_cache().clear()
    again = place(kept["api"], kept["menu"], "k1", note="call me")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == kept["first"].content


def test_suspension_comes_first(make_tenant, settings, tmp_path):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    tenant = make_tenant()
    menu = menu_for(tenant)
    diner = api_for(tenant, diner="zoe")
    app = api_for(tenant)
    assert place(diner, menu, "k1").status_code == 201
    owner = Client()
    owner.force_login(make_merchant(tenant, "owner-user"))
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    # when only the first step has run
    job = run_offboarding(job.pk, max_steps=1)
    # then the tenant is offboarding, its keys revoked, its sessions ended, nothing exported yet
    assert job.phase == TenantOffboarding.Phase.EXPORT
    assert Tenant.objects.get(pk=tenant.pk).status == Tenant.Status.OFFBOARDING
    assert app.get("/api/v1/menu/").status_code == 401
    assert diner.get("/api/v1/orders/").status_code == 401
    assert not ApiClient.objects.filter(tenant=tenant, revoked_at__isnull=True).exists()
    assert not Path(job.export_path).exists()
    assert owner.get("/dashboard/").status_code == 403


def test_rerun_after_the_end_changes_nothing(make_tenant, tmp_path):
    tenant = make_tenant(slug="gone")
    call_command(
        "offboard_tenant",
        "--noinput",
        "gone",
        "--export",
        str(tmp_path / "g.zip"),
        stdout=io.StringIO(),
    )
    out = io.StringIO()
    call_command(
        "offboard_tenant", "--noinput", "gone", "--export", str(tmp_path / "g.zip"), stdout=out
    )
    assert "gone was offboarded by job" in out.getvalue()
    assert TenantOffboarding.objects.filter(tenant_ref=tenant.pk).count() == 1


def test_an_exported_job_keeps_its_archive_path(make_tenant, tmp_path):
    tenant = make_tenant(slug="busy")
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=2)  # suspended and exported
    with pytest.raises(CommandError, match="run it again with that path"):
        call_command("offboard_tenant", "--noinput", "busy", "--export", str(tmp_path / "b.zip"))


def test_a_failed_export_is_kept_on_the_job_and_another_path_finishes_it(make_tenant, tmp_path):
    tenant = make_tenant(slug="busy")
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    (tmp_path / "a-file").write_text("not a directory")
    unwritable = tmp_path / "a-file" / "busy.zip"
    with pytest.raises(OSError):
        call_command("offboard_tenant", "--noinput", "busy", "--export", str(unwritable))
    job = TenantOffboarding.objects.get()
    assert job.phase == TenantOffboarding.Phase.EXPORT and "Error" in job.last_error
    assert Tenant.objects.get(pk=tenant.pk).status == Tenant.Status.OFFBOARDING
    out = io.StringIO()
    call_command(
        "offboard_tenant", "--noinput", "busy", "--export", str(tmp_path / "busy.zip"), stdout=out
    )
    job.refresh_from_db()
    assert job.is_done and job.last_error == "" and (tmp_path / "busy.zip").exists()


@pytest.mark.django_db(transaction=True)
def test_an_export_that_fails_half_written_leaves_no_partial_archive(
    make_tenant, tmp_path, settings
):
    """An export that fails while writing (the disk full: here a limit on the size of the
    files the command's process may write) left its partial archive beside the path, with the
    diners' ids, notes and contact details written so far; finished under another path (the
    admin's action names a new one each time), the offboarding kept that file for good, where
    nobody hands it over or deletes it."""
    tenant = make_tenant(slug="busy")
    busy_tenant(tenant)
    first_dir, second_dir = tmp_path / "full", tmp_path / "roomy"
    first_dir.mkdir()
    env = {
        **os.environ,
        "DEBUG": "1",
        "APP_DB_NAME": settings.DATABASES["default"]["NAME"],
        "OFFBOARDING_DRAIN_SECONDS": "0",
    }

    def small_files() -> None:  # in the command's process: a write past 512 bytes fails
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.RLIM_INFINITY))

    # given an export that fails half-written
    command = [sys.executable, "manage.py", "offboard_tenant", "--noinput", "busy"]
    command += ["--export", str(first_dir / "busy.zip")]
    failed = subprocess.run(
        command, cwd=PROJECT_ROOT, env=env, capture_output=True, timeout=120,
        preexec_fn=small_files,
    )  # fmt: skip
    assert failed.returncode != 0, failed.stdout.decode()
    assert b"File too large" in failed.stderr
    job = TenantOffboarding.objects.get()
    assert job.phase == TenantOffboarding.Phase.EXPORT
    # then nothing of it is left beside the path
    assert list(first_dir.iterdir()) == []
    # and the offboarding finished under another path leaves none either
    call_command("offboard_tenant", "--noinput", "busy", "--export", str(second_dir / "busy.zip"))
    job.refresh_from_db()
    assert job.is_done
    assert list(first_dir.iterdir()) == []
    assert [p.name for p in second_dir.iterdir()] == ["busy.zip"]


def test_bad_arguments_are_refused(db, tmp_path):
    with pytest.raises(CommandError, match="no tenant with slug 'nope'"):
        call_command("offboard_tenant", "--noinput", "nope", "--export", str(tmp_path / "x.zip"))
    with pytest.raises(CommandError, match="at least 1"):
        call_command(
            "offboard_tenant", "--noinput", "nope", "--export", "x.zip", "--batch-size", "0"
        )


def test_other_processes_drop_the_tenants_cached_results(make_tenant, tmp_path):
    from idempotency.core.keys import redis_key_for

    # given another process's local cache holding one of the tenant's results
    tenant = make_tenant(slug="leaving")
    assert place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1").status_code == 201
    key = redis_key_for(tenant=str(tenant.pk), scope="diner:zoe|POST|api/v1/orders/", key="k1")
    archive = str(tmp_path / "a.zip")
    # when the tenant is offboarded, then that process drops it
    assert dropped_by_another_process(
        str(tenant.pk),
        key,
        lambda: call_command(
            "offboard_tenant", "--noinput", "leaving", "--export", archive, stdout=io.StringIO()
        ),
    )


def test_counts_and_audits_written_after_the_engine_phase_are_gone_at_the_end(
    make_tenant, tmp_path
):
    # given an offboarding past its engine phase
    from idempotency.audit import AuditEvent
    from idempotency.audit.storage import save_events

    tenant = make_tenant(slug="leaving")
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    while TenantOffboarding.objects.get(pk=job.pk).phase in ("suspend", "export", "engine"):
        run_offboarding(job.pk, max_steps=1)
    # when another server process's batch of outcomes flushes only now (it counts first
    # executions in memory, flushed every AUDIT_FLUSH_SECONDS), with a request's audit
    late = dict(tenant_key=str(tenant.pk), endpoint="POST api/v1/orders/", source="redis")
    save_events(
        [
            AuditEvent(**late, key="k1:x", outcome="MISS", principal="diner:zoe"),
            AuditEvent(**late, key="k1:y", outcome="HIT", principal="diner:zoe",
                       request_meta={"remote_addr": "203.0.113.9", "user_agent": "Zoe/1"}),
        ]
    )  # fmt: skip
    run_offboarding(job.pk)
    # then nothing of the tenant is left in the engine's tables either
    assert {label: rows for label, rows in rows_of_tenant(tenant.pk).items() if rows} == {}


def test_another_offboardings_archive_is_never_written_over(make_tenant, tmp_path):
    # given a restaurant offboarded to a.zip (the archive not handed over yet), and a new
    # restaurant that took its slug since
    gone = make_tenant(slug="acme")
    place(api_for(gone, diner="zoe"), menu_for(gone), "k1", note="the first acme's diner")
    archive = tmp_path / "a.zip"
    call_command(
        "offboard_tenant", "--noinput", "acme", "--export", str(archive), stdout=io.StringIO()
    )
    handed_over = archive.read_bytes()
    newcomer = make_tenant(slug="acme")
    # when the same command is run again (a retried script, a copied line)
    with pytest.raises(CommandError, match="archive of offboarding"):
        call_command(
            "offboard_tenant", "--noinput", "acme", "--export", str(archive), stdout=io.StringIO()
        )
    # then the first archive is as it was, and the new restaurant untouched
    assert archive.read_bytes() == handed_over
    assert Tenant.objects.get(pk=newcomer.pk).status == Tenant.Status.ACTIVE
    assert TenantOffboarding.objects.count() == 1


def test_an_archive_gone_before_the_tables_phase_is_written_again_before_anything_goes(
    make_tenant, tmp_path
):
    # given an offboarding whose archive is written and whose tables are next
    tenant = make_tenant(slug="leaving")
    menu = menu_for(tenant)
    placed = place(api_for(tenant, diner="zoe"), menu, "k1", note="call me")
    archive = tmp_path / "a.zip"
    job = start_offboarding(tenant=tenant, export_path=archive, requested_by="t")
    while TenantOffboarding.objects.get(pk=job.pk).phase != TenantOffboarding.Phase.TABLES:
        run_offboarding(job.pk, max_steps=1)
    # when the archive is removed (an operator tidied the directory too early)
    archive.unlink()
    run_offboarding(job.pk)
    # then it was written again before the order went
    with zipfile.ZipFile(archive) as done:
        exported = {row["pk"] for row in json.loads(done.read("orders.json"))}
    assert exported == {int(placed.json()["id"])}
    job.refresh_from_db()
    assert job.is_done and not Order.all_tenants.filter(tenant_id=tenant.pk).exists()


def test_a_requester_longer_than_the_job_keeps_is_refused(make_tenant, tmp_path):
    """The job keeps 200 characters of who asked: a longer ``--by`` was cut without a word
    (red: the offboarding started and kept the first 200)."""
    tenant = make_tenant(slug="long")
    with pytest.raises(CommandError, match="--by"):
        call_command(
            "offboard_tenant",
            "--noinput",
            "long",
            "--export",
            str(tmp_path / "l.zip"),
            "--by",
            "d" * 201,
        )
    assert not TenantOffboarding.objects.filter(tenant_ref=tenant.pk).exists()


@pytest.mark.parametrize(
    "answer", ["trattoria\n", "", "\n"], ids=["another-slug", "no-answer", "empty"]
)
def test_the_command_starts_nothing_until_the_slug_is_typed(
    make_tenant, tmp_path, monkeypatch, answer
):
    """Given only a slug, it erased a whole restaurant without a word, where the admin wants
    the slug typed; a script says --noinput."""
    # given a restaurant with orders
    tenant = make_tenant(slug="busy")
    busy_tenant(tenant)
    orders = Order.all_tenants.filter(tenant=tenant).count()
    archive = tmp_path / "busy.zip"
    # when the operator at a terminal answers anything but its slug, or ends the input
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    out = io.StringIO()
    with pytest.raises(CommandError, match="nothing was done"):
        call_command("offboard_tenant", "busy", "--export", str(archive), stdout=out)
    # then it said what would go, and nothing started
    assert f"busy (T1, {orders} orders)" in out.getvalue()
    assert "cannot be undone" in out.getvalue()
    assert Tenant.objects.get(pk=tenant.pk).status == Tenant.Status.ACTIVE
    assert not TenantOffboarding.objects.exists()
    assert not archive.exists()
    assert Order.all_tenants.filter(tenant=tenant).count() == orders
    # and typed, the slug offboards it
    monkeypatch.setattr("sys.stdin", Terminal("busy\n"))
    call_command("offboard_tenant", "busy", "--export", str(archive), stdout=io.StringIO())
    assert not Tenant.objects.filter(pk=tenant.pk).exists() and archive.exists()


def test_a_run_with_no_terminal_to_ask_offboards_as_written(make_tenant, tmp_path, monkeypatch):
    """A script, cron or ``call_command``: its arguments were written down on purpose, and
    there is no one to type the slug."""
    tenant = make_tenant(slug="busy")
    busy_tenant(tenant)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    call_command(
        "offboard_tenant", "busy", "--export", str(tmp_path / "b.zip"), stdout=io.StringIO()
    )
    assert not Tenant.objects.filter(pk=tenant.pk).exists()
