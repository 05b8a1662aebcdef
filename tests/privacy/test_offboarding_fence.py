"""Nothing written after an offboarding's suspension escapes its archive.

A request authenticated before the suspension may still be running when it commits. Each
test holds a row lock the request needs (a dish's stock, an order's row), so the request is
known to be past authentication and waiting, found by asking PostgreSQL who waits, not by
timing; the offboarding then runs until it has begun deleting the tenant's tables, the lock
is released, the request finishes, and the offboarding runs to its end. Afterwards the
request was refused as the suspension's (403 ``TENANT_SUSPENDED``), the archive holds every
order as it was, and nothing of the tenant is left.
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client

from ordering.background.dead_letters import discard_dead_letter
from ordering.models import (
    Compensation,
    DeadLetter,
    Dish,
    Order,
    Payment,
    ProviderConflict,
    TenantOffboarding,
)
from ordering.payments.conflicts import resolve_conflict
from ordering.payments.simulated import complete_payment
from ordering.privacy.offboarding import WAITING_FOR_MONEY, run_offboarding, start_offboarding
from ordering.privacy.tenant_tables import deletion_order
from ordering.services.lifecycle import cancel_order
from ordering.simulation import plan_fault
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tenants.write_fence import fenced_columns, install, refused_by_fence
from tests.conftest import api_for, menu_for
from tests.dashboard.factories import make_merchant
from tests.payments.helpers import paid_order, paying_order
from tests.privacy.conftest import tenant_keys
from tests.privacy.test_erase_diner import place
from tests.privacy.test_offboard_tenant import rows_of_tenant
from tests.privacy.test_offboarding_resumes import waiting_on_a_lock
from tests.support.concurrency import in_thread
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _tables_begun(job_id: int) -> bool:
    job = TenantOffboarding.objects.get(pk=job_id)
    return any(model._meta.label in job.counts for model in deletion_order())


def _offboard_until_tables_begun(job_id: int) -> TenantOffboarding:
    while not _tables_begun(job_id):
        job = run_offboarding(job_id, max_steps=1)
        assert not job.is_done, "the offboarding finished before its tables phase was seen"
    return TenantOffboarding.objects.get(pk=job_id)


@pytest.mark.parametrize(
    "late_write", ["a new order", "a merchant's move", "a move on the dashboard"]
)
def test_a_write_in_flight_at_the_suspension_is_refused_not_lost(
    late_write, make_tenant, tmp_path, settings
):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    # given a restaurant with an order, and a request of it past authentication, waiting on
    # a row we hold locked
    tenant = make_tenant(slug="leaving")
    menu = menu_for(tenant)
    first = place(api_for(tenant, diner="zoe"), menu, "k1", note="call me")
    assert first.status_code == 201
    order_id = int(first.json()["id"])
    if late_write == "a new order":
        diner = api_for(tenant, diner="yan")
        request = lambda: place(diner, menu, "late", note="placed as the restaurant left")  # noqa: E731
        held = Dish.all_tenants.filter(pk=menu["pizza"].pk)
    elif late_write == "a move on the dashboard":
        owner = Client(raise_request_exception=False)
        owner.force_login(make_merchant(tenant, "owner-user"))
        request = lambda: owner.post(  # noqa: E731
            f"/dashboard/orders/{order_id}/transition/", {"to": "CANCELLED"}
        )
        held = Order.all_tenants.filter(pk=order_id)
    else:
        merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
        request = lambda: merchant.post(  # noqa: E731
            f"/api/v1/orders/{order_id}/transition/", {"to": "CANCELLED"}, format="json"
        )
        held = Order.all_tenants.filter(pk=order_id)
    archive = tmp_path / "leaving.zip"
    job = start_offboarding(tenant=tenant, export_path=archive, requested_by="t", batch_size=1)
    answers: list[Any] = []
    offboarded: list[Any] = []
    with transaction.atomic():
        list(held.select_for_update(of=("self",)))
        writer = in_thread(request, answers)
        wait_until(lambda: waiting_on_a_lock() > 0 or answers, what="the request to wait")
        assert answers == [], "the request did not wait on the lock held"
        # when the offboarding suspends, exports and begins deleting the tables meanwhile
        runner = in_thread(lambda: _offboard_until_tables_begun(job.pk), offboarded)
        runner.join(120)
        assert len(offboarded) == 1 and isinstance(offboarded[0], TenantOffboarding), offboarded
    # and the request finishes only then
    writer.join(120)
    run_offboarding(job.pk)
    # then it was refused as the suspension's, and nothing of it was written
    (answer,) = answers
    assert answer.status_code == 403
    if late_write != "a move on the dashboard":  # the page a suspended restaurant's member gets
        assert answer.json()["code"] == "TENANT_SUSPENDED"
    # the archive holds the order as it was before the suspension
    with zipfile.ZipFile(archive) as done:
        orders = json.loads(done.read("orders.json"))
        manifest = json.loads(done.read("manifest.json"))
    assert [(o["pk"], o["fields"]["status"]) for o in orders] == [(order_id, "CREATED")]
    assert manifest["files"]["orders.json"] == 1
    # and nothing of the restaurant is left
    job.refresh_from_db()
    assert job.is_done
    assert {label: rows for label, rows in rows_of_tenant(tenant.pk).items() if rows} == {}
    assert tenant_keys(str(tenant.pk)) == {}


def test_every_table_of_a_tenant_is_fenced():
    # given the tables found from the schema (a table added later is among them)
    fenced = fenced_columns()
    assert {"ordering_order", "ordering_payment", "tenants_dinersession"} <= set(fenced)
    # then each of their tenant columns has the fence's trigger
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        )
        present = set(cursor.fetchall())
    missing = [
        (table, column)
        for table, columns in fenced.items()
        for column in columns
        if (table, f"tenant_write_fence_{column}") not in present
    ]
    assert missing == []


def test_a_worker_writing_after_the_suspension_is_refused(make_tenant, tmp_path):
    # given a restaurant with a paid order whose offboarding has suspended it
    tenant, other = make_tenant(slug="leaving"), make_tenant(slug="staying")
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1")
    order = Order.all_tenants.get(tenant=tenant)
    payment = Payment.all_tenants.create(
        tenant=tenant, order=order, provider="simulated", provider_txn_id="tx-1",
        method="card", amount=order.total, status=Payment.Status.SUCCEEDED,
    )  # fmt: skip
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=1)
    # when a worker (no request, no credential) changes the payment or adds a row of it
    writes = {
        "payment": lambda: Payment.all_tenants.filter(pk=payment.pk).update(status="refunded"),
        "dish": lambda: Dish.all_tenants.create(tenant=tenant, name="Late", price=1, stock=1),
    }
    for what, write in writes.items():
        with pytest.raises(DatabaseError) as refused, transaction.atomic():
            write()
        # then the database refuses it, as the fence's
        assert refused_by_fence(refused.value), what
    # and another restaurant writes as before
    assert Dish.all_tenants.create(tenant=other, name="Soup", price=1, stock=1).pk


def test_what_requests_in_flight_store_in_redis_after_its_phase_is_gone_at_the_end(
    make_tenant, tmp_path
):
    # given an offboarding past its Redis phase
    from idempotency.core.tokens import issue_tokens

    tenant = make_tenant(slug="leaving")
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    while TenantOffboarding.objects.get(pk=job.pk).phase != TenantOffboarding.Phase.TABLES:
        run_offboarding(job.pk, max_steps=1)
    assert tenant_keys(str(tenant.pk)) == {}
    # when a request authenticated before the suspension issues its diner tokens only now (a
    # write to Redis alone: no table fences it)
    issue_tokens(tenant=str(tenant.pk), principal="diner:yan", count=2)
    assert any(b"diner:yan" in value for value in tenant_keys(str(tenant.pk)).values())
    run_offboarding(job.pk)
    # then nothing under the tenant's hash tag is left on any node
    assert tenant_keys(str(tenant.pk)) == {}


def test_a_migrate_before_a_fenced_table_exists_fences_the_tables_that_do():
    # given the schema of a database where one table of a tenant is not created yet (a
    # ``migrate tenants`` on a new database, or a migrate back to before the table)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ordering_salesday RENAME TO ordering_salesday_elsewhere")
        cursor.execute("DROP TRIGGER tenant_write_fence_tenant_id ON ordering_dish")
    try:
        # when the fence is installed after that migrate, then it fails on nothing
        install(using="default")
        # and the tables that exist are fenced
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE t.tgname = 'tenant_write_fence_tenant_id'"
            )
            fenced = {table for (table,) in cursor.fetchall()}
        assert "ordering_dish" in fenced
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE ordering_salesday_elsewhere RENAME TO ordering_salesday")
        install(using="default")


def test_a_key_first_used_as_the_suspension_revokes_it_deadlocks_neither(make_tenant, tmp_path):
    """A request's key writes its ``last_used_at`` (its row locked, then the fence's trigger
    waits for the tenant's row); the suspension closed the tenant's row first, then revoked the
    keys, that one's row included: each waited for the other, and PostgreSQL ended one of them
    as a deadlock (the offboarding's step failed, or the request answered 500)."""
    # given a restaurant with a key, and a merchant key of it not used yet
    tenant = make_tenant(slug="leaving")
    menu_for(tenant)
    first, _ = issue_api_key(tenant=tenant, name="first", kind=ApiClient.Kind.MERCHANT)
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    suspended: list[Any] = []
    answers: list[Any] = []
    with transaction.atomic():
        # the suspension is held up at the first key's row (the key in use elsewhere)
        list(ApiClient.objects.select_for_update().filter(pk=first.pk))
        runner = in_thread(lambda: run_offboarding(job.pk, max_steps=1), suspended)
        wait_until(lambda: waiting_on_a_lock() >= 1, what="the suspension to wait")
        # when a request uses the new key meanwhile
        request = in_thread(lambda: merchant.get("/api/v1/orders/"), answers)
        wait_until(lambda: waiting_on_a_lock() >= 2 or answers, what="the request")
    runner.join(60)
    request.join(60)
    # then both end: the tenant is suspended, and the request was answered (before it)
    assert len(suspended) == 1 and isinstance(suspended[0], TenantOffboarding), suspended
    assert suspended[0].phase == TenantOffboarding.Phase.EXPORT
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    assert answers[0].status_code == 200


def test_an_offboarding_waits_for_the_money_in_flight_then_closes_the_tables(make_tenant, tmp_path):
    """The fence would refuse the provider's settlement of a payment (and a cancel's refund):
    the diner's money would leave with the restaurant. The suspension stops new business and
    waits for it (red: the payment's settlement refused by the fence)."""
    # given a restaurant with an order whose payment the provider has not settled
    tenant = make_tenant(slug="leaving")
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    order = Order.all_tenants.get(tenant=tenant)
    payment = Payment.all_tenants.create(
        tenant=tenant, order=order, provider="simulated", provider_txn_id="tx-1",
        method="card", amount=order.total,
    )  # fmt: skip
    _, key = issue_api_key(tenant=tenant, name="pos")
    # when its offboarding runs
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    with pytest.raises(CommandError, match="1 payments awaiting the provider"):
        call_command("offboard_tenant", "--noinput", "leaving", "--export", str(tmp_path / "a.zip"))
    job = run_offboarding(job.pk)
    # then it is suspended, no request is taken, and it waits, its tables open
    job.refresh_from_db()
    tenant.refresh_from_db()
    assert (job.phase, tenant.status) == (TenantOffboarding.Phase.SUSPEND, "suspended")
    assert job.last_error.startswith(WAITING_FOR_MONEY)
    assert Client().get("/api/v1/menu/", HTTP_AUTHORIZATION=f"Api-Key {key}").status_code == 401
    # and the provider's settlement still lands
    Payment.all_tenants.filter(pk=payment.pk).update(status=Payment.Status.SUCCEEDED)
    # once nothing moves, the next run closes the tables and finishes
    job = run_offboarding(job.pk)
    assert job.is_done and job.last_error == ""
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        payments = [
            json.loads(line)
            for name in archive.namelist()
            if "payment" in name and "callback" not in name
            for line in archive.read(name).decode().splitlines()
            if line.strip()
        ]
    assert "succeeded" in json.dumps(payments)


def test_an_offboarding_waits_for_a_payment_staff_have_yet_to_settle(
    make_tenant, tmp_path, settings, celery_eager
):
    """Money the provider took after a cancel is refunded by the platform; a refund failing
    for good leaves its conflict open for staff, who refund it by hand (as they settle an
    amount reported wrong). An offboarding that closed the tables meanwhile deleted the
    conflict and its dead letter: nothing told staff the diner's money was still to go back.
    Red before: open conflicts were not money in flight, and the offboarding finished."""
    settings.SAGA_MAX_RETRIES = 0  # the refund's first failure is its last
    # given a capture after a cancel whose refund by the platform failed for good
    tenant = make_tenant(slug="leaving")
    order, payment = paying_order(tenant, menu_for(tenant)["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    result = complete_payment(provider_name="simulated", provider_txn_id=payment.provider_txn_id)
    assert result.outcome == "conflict"
    assert DeadLetter.objects.filter(order=order, state=DeadLetter.State.OPEN).count() == 1
    conflict = ProviderConflict.all_tenants.get(payment=payment, resolved=False)
    # when its offboarding runs
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    job = run_offboarding(job.pk)
    # then it is suspended and waits for staff, its tables open
    job.refresh_from_db()
    tenant.refresh_from_db()
    assert (job.phase, tenant.status) == (TenantOffboarding.Phase.SUSPEND, "suspended")
    assert job.last_error.startswith(f"{WAITING_FOR_MONEY}: 1 payments under review by staff")
    # once staff settled it, the next run closes the tables and finishes
    resolve_conflict(
        conflict_id=conflict.pk, outcome="refunded", note="refunded by hand", actor="staff:ann"
    )
    job = run_offboarding(job.pk)
    assert job.is_done and job.last_error == ""


def test_an_offboarding_does_not_wait_for_a_cancel_staff_settled_by_hand(
    make_tenant, tmp_path, settings, celery_eager
):
    """A cancel whose refund failed for good stays CANCELLING with a dead letter; staff who
    refund by hand discard the letter, and the order stays where it is (nothing runs it
    again). It moves no money any more, yet every CANCELLING order counted as a cancel in
    progress: the restaurant could never be offboarded, and the only way on, a requeue,
    would refund again what staff had refunded. Red before: the offboarding waited for it."""
    settings.SAGA_MAX_RETRIES = 0  # the refund's first failure is its last
    # given a paid order whose cancel's refund failed for good, and staff who settled it
    tenant = make_tenant(slug="leaving")
    order, _ = paid_order(tenant, menu_for(tenant)["pizza"])
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    letter = DeadLetter.objects.get(order=order, state=DeadLetter.State.OPEN)
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    job = run_offboarding(job.pk)
    assert job.last_error.startswith(f"{WAITING_FOR_MONEY}: 1 cancels in progress")
    discard_dead_letter(dead_letter_id=letter.pk, actor="staff:ann", note="refunded by hand")
    # when the offboarding runs again, then it closes the tables and finishes
    job = run_offboarding(job.pk)
    assert job.is_done and job.last_error == ""
    assert Order.all_tenants.filter(pk=order.pk).count() == 0


def test_the_worker_looks_again_a_minute_later_while_the_money_moves(
    make_tenant, tmp_path, monkeypatch
):
    """Not at once, message after message, for as long as a payment stays unsettled."""
    from ordering.background import dispatch, tasks

    tenant = make_tenant(slug="leaving")
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    order = Order.all_tenants.get(tenant=tenant)
    Payment.all_tenants.create(
        tenant=tenant, order=order, provider="simulated", provider_txn_id="tx-1",
        method="card", amount=order.total,
    )  # fmt: skip
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    sent: list[tuple[object, ...]] = []
    monkeypatch.setattr(dispatch, "enqueue", lambda *args, **kw: sent.append((*args, kw)))

    assert tasks.offboard_tenant(job.pk) == TenantOffboarding.Phase.SUSPEND

    assert sent == [(dispatch.OFFBOARD_TENANT, job.pk, {"countdown": tasks.MONEY_RECHECK_SECONDS})]


@pytest.mark.parametrize("status", ["PAID", "ACCEPTED", "PREPARING", "READY", "DELIVERING"])
def test_an_offboarding_waits_for_paid_orders_not_delivered(make_tenant, tmp_path, status):
    """An order the diner paid for and neither got nor was refunded holds the diner's money:
    the offboarding deleted it with the restaurant's rows, and the money was never given
    back. Red before: paid orders were no money in flight, and the offboarding finished."""
    # given a restaurant with a paid order not delivered
    tenant = make_tenant(slug="leaving")
    order, _ = paid_order(tenant, menu_for(tenant)["pizza"])
    Order.all_tenants.filter(pk=order.pk).update(status=status)
    # when its offboarding runs, then it stops and names the order and what to do
    with pytest.raises(CommandError) as stopped:
        call_command("offboard_tenant", "--noinput", "leaving", "--export", str(tmp_path / "a.zip"))
    assert f"1 paid orders not delivered ({order.pk}:" in str(stopped.value)
    assert "cancel them to refund their diners" in str(stopped.value)
    assert "--cancel-paid-orders" in str(stopped.value)
    job = TenantOffboarding.objects.get(tenant_ref=tenant.pk)
    tenant.refresh_from_db()
    assert (job.phase, tenant.status) == (TenantOffboarding.Phase.SUSPEND, "suspended")
    assert Order.all_tenants.filter(pk=order.pk, status=status).exists()
    # once it is delivered, the next run finishes
    Order.all_tenants.filter(pk=order.pk).update(status="COMPLETED")
    assert run_offboarding(job.pk).is_done


def test_cancel_paid_orders_refunds_each_diner_once_however_many_runs(make_tenant, tmp_path):
    """``--cancel-paid-orders`` cancels every paid order a cancel takes, refunding its diner
    through the cancel saga, once even when two runs of the command cancel at the same time;
    an order on its way to the diner is left for staff to complete."""
    from config.celery import app
    from ordering.background.tasks import handle_outbox_event
    from ordering.models import EventType, OutboxEvent, SimulatedOperation

    # given a leaving restaurant with two paid orders and one on its way to the diner
    tenant = make_tenant(slug="leaving")
    pizza = menu_for(tenant)["pizza"]
    paid, paid_payment = paid_order(tenant, pizza)
    preparing, preparing_payment = paid_order(tenant, pizza)
    Order.all_tenants.filter(pk=preparing.pk).update(status="PREPARING")
    on_its_way, _ = paid_order(tenant, pizza)
    Order.all_tenants.filter(pk=on_its_way.pk).update(status="DELIVERING")
    args = ["offboard_tenant", "--noinput", "leaving", "--export", str(tmp_path / "a.zip")]
    # when two runs of the command cancel the paid orders at once (the saga's messages wait
    # in the broker)
    answers: list[Any] = []
    runs = [in_thread(lambda: call_command(*args, "--cancel-paid-orders"), answers) for _ in "ab"]
    for run in runs:
        run.join(120)
    # then each stops waiting for the two cancels and the order on its way
    assert len(answers) == 2 and all(isinstance(a, CommandError) for a in answers), answers
    assert all("2 cancels in progress" in str(a) for a in answers), answers
    assert all(f"1 paid orders not delivered ({on_its_way.pk}:" in str(a) for a in answers)
    # and each order was cancelled once: one cancel for the saga each
    cancels = OutboxEvent.all_tenants.filter(tenant=tenant, event_type=EventType.CANCEL_REQUESTED)
    assert sorted(cancels.values_list("order_id", flat=True)) == [paid.pk, preparing.pk]
    # and once the worker ran the saga, each of those diners was refunded once
    eager, app.conf.task_always_eager = app.conf.task_always_eager, True  # its sends run here
    try:
        for event_id in cancels.values_list("pk", flat=True):
            handle_outbox_event.apply(args=[event_id])
    finally:
        app.conf.task_always_eager = eager
    refs = sorted(
        SimulatedOperation.objects.filter(kind="refund").values_list("reference", "calls")
    )
    assert refs == sorted(
        [(paid_payment.provider_txn_id, 1), (preparing_payment.provider_txn_id, 1)]
    ), refs
    statuses = dict(Order.all_tenants.filter(tenant=tenant).values_list("pk", "status"))
    assert statuses == {
        paid.pk: "CANCELLED",
        preparing.pk: "CANCELLED",
        on_its_way.pk: "DELIVERING",
    }
    # once staff completed the delivered order, the command finishes (nothing cancelled again)
    Order.all_tenants.filter(pk=on_its_way.pk).update(status="COMPLETED")
    call_command(*args, "--cancel-paid-orders")
    assert TenantOffboarding.objects.get(tenant_slug="leaving").is_done
