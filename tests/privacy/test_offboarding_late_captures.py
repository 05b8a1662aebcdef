"""A capture the provider reports after a restaurant's tables closed is refunded, once.

An offboarding closes a restaurant's tables once none of its payments awaits the provider,
then deletes them. A provider may still report a capture of a payment our side had voided or
seen declined. Before, the webhook answered 403 while the tables were fenced and 404 once
they were deleted: the diner's money stayed taken, and nobody saw it. Now the platform keeps
those payments (``DepartedPayment``, no foreign key to the restaurant), answers such a
capture 200 ``conflict`` and refunds it through the provider once, however many deliveries
of it arrive and however often the refund is sent again; staff see it in the admin.

Real PostgreSQL (the fence's trigger is real), the real offboarding, concurrent deliveries
on threads, and the simulated provider's own books for the refunds it made.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from ordering.models import Dish, Order, Payment, SimulatedOperation, TenantOffboarding
from ordering.payments.simulated import signed_callback
from ordering.privacy.offboarding import run_offboarding, start_offboarding
from ordering.services.lifecycle import cancel_order
from tenants.models import Tenant
from tests.conftest import menu_for
from tests.payments.helpers import paying_order, post_callback
from tests.privacy.test_offboarding_resumes import waiting_on_a_lock
from tests.support.concurrency import at_once, in_thread
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_eager")]
DELIVERIES = 6
LATE = "paid_after_offboarding"


def voided_payment(tenant: Tenant) -> tuple[Order, Payment]:
    """An order the diner cancelled while the bank was still charging the card: CANCELLED,
    its payment voided, nothing of it in flight for the offboarding to wait for."""
    dish = Dish.all_tenants.filter(tenant=tenant).first() or menu_for(tenant)["pizza"]
    order, payment = paying_order(tenant, dish, quantity=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED
    return order, payment


def deliver(payment: Payment, *, event_id: str, **reported: Any) -> Any:
    """The provider's signed "succeeded" callback for ``payment``, over HTTP."""
    body, headers = signed_callback(payment=payment, event_id=event_id, **reported)
    return post_callback(APIClient(), body, headers)


def refunds(payment: Payment) -> list[tuple[int | None, str, Decimal, int]]:
    """What the simulated provider's books hold of refunds of ``payment``: (account,
    idempotency key, amount, times asked)."""
    return list(
        SimulatedOperation.objects.filter(kind="refund", reference=payment.provider_txn_id)
        .order_by("pk")
        .values_list("tenant_id", "idempotency_key", "amount", "calls")
    )


def refund_key(payment: Payment) -> str:
    return f"refund-departed:{payment.provider}:{payment.provider_txn_id}"


def offboard(slug: str, tmp_path: Any) -> None:
    call_command("offboard_tenant", "--noinput", slug, "--export", str(tmp_path / f"{slug}.zip"))
    assert not Tenant.objects.filter(slug=slug).exists()


def test_a_capture_after_the_restaurant_left_is_refunded_once_however_often_delivered(
    make_tenant, tmp_path
):
    # given a restaurant whose diner cancelled while the card was being charged, and which
    # then left the platform (its rows deleted)
    tenant = make_tenant(slug="leaving")
    order, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    # when the provider reports the capture late, six deliveries at once (three of one
    # event, three under events of their own)
    events = ["evt_late"] * 3 + [f"evt_late_{n}" for n in range(3)]
    answers = at_once(*(lambda e=e: deliver(payment, event_id=e) for e in events))
    # then every delivery is answered 200; one records the conflict, the rest are duplicates
    assert [getattr(a, "status_code", a) for a in answers] == [200] * DELIVERIES, answers
    results = sorted((a.json()["result"], a.json()["conflict"]) for a in answers)
    assert results == [("conflict", LATE)] + [("duplicate", None)] * (DELIVERIES - 1)
    assert {a.json()["order_id"] for a in answers} == {str(order.pk)}
    assert {a.json()["order_status"] for a in answers} == {"CANCELLED"}
    # and the platform refunded the diner once, from its own account, under one key
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]
    # and neither a later redelivery nor the resend sweep sends it again
    assert deliver(payment, event_id="evt_late").json()["result"] == "duplicate"
    from ordering.background.tasks import resend_capture_refunds

    assert resend_capture_refunds() == 0
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]


def test_a_capture_while_the_tables_are_closed_is_refunded_once(make_tenant, tmp_path):
    # given a restaurant whose offboarding has closed its tables, not yet deleted them
    tenant = make_tenant(slug="leaving")
    order, payment = voided_payment(tenant)
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    job = run_offboarding(job.pk, max_steps=1)
    tenant.refresh_from_db()
    assert (job.phase, tenant.status) == (TenantOffboarding.Phase.EXPORT, "offboarding")
    # when the provider reports the capture of its voided payment
    answer = deliver(payment, event_id="evt_late")
    # then it is answered 200 conflict (not refused 403 by the fence), and refunded once
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "result": "conflict",
        "order_id": str(order.pk),
        "order_status": "CANCELLED",
        "conflict": LATE,
    }
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]
    # and the offboarding finishes, after which the same capture is a duplicate, not a refund
    assert run_offboarding(job.pk).is_done
    assert deliver(payment, event_id="evt_late_again").json()["result"] == "duplicate"
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]


def test_an_event_about_no_payment_kept_is_still_not_found(make_tenant, tmp_path):
    # given a restaurant that left with a payment the diner completed (nothing to capture)
    tenant = make_tenant(slug="leaving")
    _, voided = voided_payment(tenant)
    order, other = paying_order(tenant, Dish.all_tenants.get(tenant=tenant, name="Pizza"))
    Payment.all_tenants.filter(pk=other.pk).update(status=Payment.Status.SUCCEEDED)
    Order.all_tenants.filter(pk=order.pk).update(status="COMPLETED")
    offboard("leaving", tmp_path)
    # when the provider reports about that payment, or about the voided one under another
    # order's id, then neither is ours: 404, and nothing is refunded
    assert deliver(other, event_id="evt_a").status_code == 404
    voided.order_id = order.pk
    assert deliver(voided, event_id="evt_b").status_code == 404
    assert SimulatedOperation.objects.filter(kind="refund").count() == 0


def test_a_decline_reported_after_the_restaurant_left_changes_nothing(make_tenant, tmp_path):
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    body, headers = signed_callback(payment=payment, status="failed", event_id="evt_failed")
    answer = post_callback(APIClient(), body, headers)
    assert (answer.status_code, answer.json()["result"]) == (200, "ignored")
    assert refunds(payment) == []


def test_a_capture_read_before_the_tables_close_and_written_after_is_refunded(
    make_tenant, tmp_path
):
    """The webhook reads the payment, then its first write waits for the suspension closing
    the tables; the fence then refuses that write. Read again, it is a departed payment's
    capture: 200 conflict and refunded, not 403."""
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    suspended: list[Any] = []
    answers: list[Any] = []
    # given the tenant's row held, so the suspension waits to close it
    with psycopg.connect(connection.connection.info.dsn, autocommit=False) as holder:
        holder.execute("SELECT 1 FROM tenants_tenant WHERE id = %s FOR UPDATE", [tenant.pk])
        suspension = in_thread(lambda: run_offboarding(job.pk, max_steps=1), suspended)
        wait_until(lambda: waiting_on_a_lock() >= 1, what="the suspension waits to close")
        # when a capture is read meanwhile, and its first write waits behind the suspension
        webhook = in_thread(lambda: deliver(payment, event_id="evt_late"), answers)
        wait_until(lambda: waiting_on_a_lock() >= 2, what="the webhook waits to write")
        holder.rollback()
    suspension.join(60)
    webhook.join(60)
    # then the tables closed, and the capture was answered as a departed payment's
    assert suspended and suspended[0].phase == TenantOffboarding.Phase.EXPORT, suspended
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    assert answers[0].status_code == 200, answers[0].content
    assert (answers[0].json()["result"], answers[0].json()["conflict"]) == ("conflict", LATE)
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]


def test_staff_see_the_late_capture_and_its_refund_in_the_admin(make_tenant, tmp_path):
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    assert deliver(payment, event_id="evt_late").json()["result"] == "conflict"
    staff = User.objects.create_superuser("ann", "ann@example.com", "pw-123456789")
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/admin/ordering/departedpayment/")
    assert page.status_code == 200
    text = page.content.decode()
    assert payment.provider_txn_id in text and "leaving" in text
    assert "Captured and refunded by the platform" in text


def _refund_refused_by_the_provider(payment: Payment) -> SimulatedOperation:
    """The provider refuses the platform's refund key: it holds it for other terms already
    (a careful provider's answer to a reused key), so every attempt fails."""
    return SimulatedOperation.objects.create(
        tenant=None,
        idempotency_key=refund_key(payment),
        kind="refund",
        reference=payment.provider_txn_id,
        amount=Decimal("0.01"),
    )


def test_a_refund_failing_for_good_waits_for_staff_and_a_requeue_refunds_once(
    make_tenant, tmp_path, settings
):
    from ordering.background.dead_letters import requeue_dead_letter
    from ordering.models import DeadLetter, DepartedPayment
    from ordering.payments.departed_refunds import refund_departed_capture

    settings.SAGA_MAX_RETRIES = 0  # the first failure is the last
    # given a restaurant that left, and a provider refusing the platform's refund
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    refused = _refund_refused_by_the_provider(payment)
    # when the capture is reported
    assert deliver(payment, event_id="evt_late").json()["result"] == "conflict"
    # then the refund is dead-lettered for staff, naming the restaurant, and the row says so
    row = DepartedPayment.objects.get(provider_txn_id=payment.provider_txn_id)
    assert row.refund == DepartedPayment.Refund.FAILED
    letter = DeadLetter.objects.get(state=DeadLetter.State.OPEN)
    assert (letter.key, letter.tenant_id, letter.order_id) == (row.letter_key, None, None)
    assert letter.payload["restaurant"] == "leaving"
    # and running it again moves nothing until staff act
    assert refund_departed_capture(departed_id=row.pk) == "dead_lettered"
    # when staff requeue it once the provider takes it (twice: a double click)
    refused.delete()
    requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:ann")
    with pytest.raises(Exception, match="not open"):
        requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:ann")
    # then it is refunded once, and a redelivery changes nothing
    row.refresh_from_db()
    assert row.refund == DepartedPayment.Refund.DONE
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]
    assert deliver(payment, event_id="evt_late").json()["result"] == "duplicate"
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]


def test_a_refund_staff_settled_by_hand_is_never_sent(make_tenant, tmp_path, settings):
    from ordering.background.dead_letters import discard_dead_letter
    from ordering.background.tasks import resend_capture_refunds
    from ordering.models import DeadLetter, DepartedPayment
    from ordering.payments.departed_refunds import refund_departed_capture

    settings.SAGA_MAX_RETRIES = 0
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    _refund_refused_by_the_provider(payment)
    assert deliver(payment, event_id="evt_late").json()["result"] == "conflict"
    letter = DeadLetter.objects.get(state=DeadLetter.State.OPEN)
    # when staff discard its letter, having refunded the diner by hand
    discard_dead_letter(dead_letter_id=letter.pk, actor="staff:ann", note="refunded by hand")
    # then the row says so, and nothing sends the refund again
    row = DepartedPayment.objects.get(provider_txn_id=payment.provider_txn_id)
    assert (row.refund, row.settled_by, row.settlement_note) == (
        DepartedPayment.Refund.SETTLED,
        "staff:ann",
        "refunded by hand",
    )
    assert refund_departed_capture(departed_id=row.pk) == "already_done"
    assert resend_capture_refunds() == 0
    assert SimulatedOperation.objects.get(idempotency_key=refund_key(payment)).calls == 1


def test_a_refund_whose_message_was_lost_is_sent_again_once(make_tenant, tmp_path, monkeypatch):
    from ordering.background import dispatch
    from ordering.models import DepartedPayment
    from ordering.payments.departed_refunds import resend_due_departed_refunds

    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    # given the broker down when the capture is recorded: its refund's message is lost
    real_enqueue = dispatch.enqueue

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "enqueue", broker_down)
    assert deliver(payment, event_id="evt_late").json()["result"] == "conflict"
    monkeypatch.setattr(dispatch, "enqueue", real_enqueue)
    row = DepartedPayment.objects.get(provider_txn_id=payment.provider_txn_id)
    assert (row.refund, refunds(payment)) == (DepartedPayment.Refund.PENDING, [])
    # when the sweep runs before the longest retry wait has passed, nothing is sent; after
    # it, the refund is sent once, and a later sweep sends nothing more
    assert resend_due_departed_refunds() == 0
    later = timezone.now() + timedelta(hours=1)
    assert resend_due_departed_refunds(now=later) == 1
    assert resend_due_departed_refunds(now=later) == 0
    assert refunds(payment) == [(None, refund_key(payment), payment.amount, 1)]


def test_departed_refunds_the_broker_did_not_take_stay_due_for_the_next_sweep(
    make_tenant, tmp_path, monkeypatch
):
    """A resend the broker refused is no send: the platform's refunds of late captures stay
    due and the next sweep sends them. The sweep marked each as sent before sending it and
    went on through its batch after a send failed (each later one refused at once while the
    process's sends paused): a broker down for a moment at one sweep put every refund owed
    to a diner back by the longest retry wait and a minute (red: none sent after)."""
    from ordering.background import dispatch
    from ordering.models import DepartedPayment
    from ordering.payments.departed_refunds import resend_due_departed_refunds
    from tests.support.broker import sending_to
    from tests.support.ports import free_port

    now = [0.0]
    monkeypatch.setattr(dispatch, "_broker", dispatch.broker_breaker(clock=lambda: now[0]))
    tenant = make_tenant(slug="leaving")
    payments = [voided_payment(tenant)[1] for _ in range(2)]
    offboard("leaving", tmp_path)
    # given two late captures whose refunds' messages were lost an hour ago
    real_enqueue = dispatch.enqueue

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "enqueue", broker_down)
    for n, payment in enumerate(payments):
        assert deliver(payment, event_id=f"evt_late_{n}").json()["result"] == "conflict"
    monkeypatch.setattr(dispatch, "enqueue", real_enqueue)
    pending = DepartedPayment.objects.filter(refund=DepartedPayment.Refund.PENDING)
    assert pending.count() == 2
    pending.update(updated_at=timezone.now() - timedelta(hours=1))
    # when the sweep meets a broker that refuses connections (nothing listens on its port)
    with sending_to(f"redis://127.0.0.1:{free_port()}/0"):
        assert resend_due_departed_refunds() == 0
    # then, once the broker answers (here: the tasks run in this process) after the pause of
    # sends, the next sweep sends both, and each is refunded once
    now[0] += dispatch.BROKER_PAUSE_SECONDS
    assert resend_due_departed_refunds() == 2
    assert [refunds(p) for p in payments] == [
        [(None, refund_key(p), p.amount, 1)] for p in payments
    ]
    assert not pending.exists()


def test_a_capture_of_another_amount_is_refunded_as_captured(make_tenant, tmp_path):
    """The restaurant is gone: no order is owed anything, so what the provider took goes back."""
    tenant = make_tenant(slug="leaving")
    _, payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    answer = deliver(payment, event_id="evt_late", amount=Decimal("5.00"))
    assert answer.json()["result"] == "conflict"
    assert refunds(payment) == [(None, refund_key(payment), Decimal("5.00"), 1)]


def test_the_retention_purge_deletes_rows_past_their_days_but_not_money_still_owed(
    make_tenant, tmp_path, settings
):
    from ordering.models import DepartedPayment
    from tenants.retention import overdue_rows, purge_expired_data

    settings.SAGA_MAX_RETRIES = 0
    # given a restaurant that left with three payments kept: one never captured, one
    # captured and refunded, one captured whose refund failed for good
    tenant = make_tenant(slug="leaving")
    payments = [voided_payment(tenant)[1] for _ in range(3)]
    _never, refunded, failed = payments
    offboard("leaving", tmp_path)
    assert deliver(refunded, event_id="evt_a").json()["result"] == "conflict"
    _refund_refused_by_the_provider(failed)
    assert deliver(failed, event_id="evt_b").json()["result"] == "conflict"
    kept = DepartedPayment.objects.filter(tenant_ref=tenant.pk)
    assert kept.count() == 3
    # when the retention has passed since each last changed, and the purge runs
    days = settings.DEPARTED_PAYMENT_RETENTION_DAYS
    kept.update(updated_at=timezone.now() - timedelta(days=days, minutes=1))
    assert overdue_rows()["departed_payments"] == 2
    purge_expired_data()
    # then the never captured and the refunded go; the one waiting for staff stays
    assert list(kept.values_list("provider_txn_id", flat=True)) == [failed.provider_txn_id]
    assert overdue_rows()["departed_payments"] == 0


def test_only_payments_a_provider_could_still_capture_are_kept(make_tenant, tmp_path, settings):
    from ordering.models import DepartedPayment

    tenant = make_tenant(slug="leaving")
    _, recent = voided_payment(tenant)
    _, old = voided_payment(tenant)
    Payment.all_tenants.filter(pk=old.pk).update(
        created_at=timezone.now()
        - timedelta(days=settings.DEPARTED_PAYMENT_RETENTION_DAYS, minutes=1)
    )
    order, paid = paying_order(tenant, Dish.all_tenants.get(tenant=tenant, name="Pizza"))
    Payment.all_tenants.filter(pk=paid.pk).update(status=Payment.Status.SUCCEEDED)
    Order.all_tenants.filter(pk=order.pk).update(status="COMPLETED")
    offboard("leaving", tmp_path)
    kept = DepartedPayment.objects.filter(tenant_ref=tenant.pk)
    assert list(kept.values_list("provider_txn_id", "tenant_slug", "payment_status")) == [
        (recent.provider_txn_id, "leaving", "voided")
    ]


def test_the_refund_s_log_names_the_payment_and_its_restaurant_once(
    make_tenant, tmp_path, settings, caplog
):
    """The operator's log lines of the platform's refund say which payment of which
    restaurant, once: the row's own text names its restaurant already, and the lines named
    it a second time ("simulated:sim_… of leaving of leaving")."""
    from ordering.models import DeadLetter

    settings.SAGA_MAX_RETRIES = 0
    tenant = make_tenant(slug="leaving")
    _, refused_payment = voided_payment(tenant)
    _, refunded_payment = voided_payment(tenant)
    offboard("leaving", tmp_path)
    _refund_refused_by_the_provider(refused_payment)
    caplog.set_level("INFO", logger="ordering.payments.departed_refunds")
    assert deliver(refused_payment, event_id="evt_refused").json()["result"] == "conflict"
    assert deliver(refunded_payment, event_id="evt_refunded").json()["result"] == "conflict"
    assert DeadLetter.objects.filter(state=DeadLetter.State.OPEN).count() == 1
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "ordering.payments.departed_refunds" and r.levelname in ("INFO", "ERROR")
    ]
    dead = f"{refused_payment.provider}:{refused_payment.provider_txn_id} of leaving"
    done = f"{refunded_payment.provider}:{refunded_payment.provider_txn_id} of leaving"
    assert [line for line in lines if "dead-lettered" in line] == [
        f"{dead}: refund failed 1 times; dead-lettered"
    ]
    assert [line.partition(" (")[0] for line in lines if "refunded by the platform" in line] == [
        f"payment {done} refunded by the platform"
    ]
