"""A provider event id received before, now carried by another event: a conflict for staff,
never a duplicate that swallows a capture.

A provider's bug, or its test mode mixed with its live one, can send an event id it used
before with another payment, status, amount or currency. The inbox, unique on the event id,
answered it ``duplicate`` and applied nothing: a real capture was lost without a trace (the
order stuck PAYING with the diner's money taken). Now what the inbox keeps of the first
delivery is compared with the new one: the same is a duplicate, as before; another is an
``event_id_reused`` conflict, recorded once for staff, with nothing applied and no money
moved."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from idempotency.models import DuplicateAudit
from idempotency.stores.audit_stream import drain_audits
from ordering.metrics import database_registry
from ordering.models import (
    Compensation,
    EventType,
    Order,
    OrderStatus,
    OutboxEvent,
    Payment,
    PaymentCallback,
    ProviderConflict,
)
from ordering.payments.callbacks import AUDIT_ENDPOINT, apply_provider_event
from ordering.payments.reconciliation import reconcile_payments
from ordering.payments.simulated import SimulatedProvider, complete_payment
from tests.dashboard.factories import make_merchant
from tests.payments.helpers import paying_order, post_callback, signed
from tests.support.concurrency import at_once, committed_once_waited_on, waiting_on_me
from tests.support.waiting import DEADLINE_SECONDS, wait_until

S = OrderStatus
REUSED = "event_id_reused"


def deliver(body: bytes, headers: dict[str, str]) -> dict[str, str]:
    response = post_callback(APIClient(), body, headers)
    assert response.status_code == 200, response.content
    return response.json()


def status_of(order: Order) -> tuple[str, str]:
    order.refresh_from_db()
    return order.status, order.payments.get().status


def reasons(outcome: str) -> list[str]:
    drain_audits()
    rows = DuplicateAudit.objects.filter(endpoint=AUDIT_ENDPOINT, outcome=outcome).order_by("id")
    return [row.request_meta["reason"] for row in rows]


@pytest.mark.django_db
def test_an_event_id_reused_for_another_payment_is_a_conflict_recorded_once(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given one order paid by the event evt_x, and another order waiting for its payment
    first, first_payment = paying_order(tenant, menu["pizza"])
    second, second_payment = paying_order(tenant, menu["pasta"])
    assert deliver(*signed(first_payment, event_id="evt_x"))["result"] == "applied"
    conflicts_counted = _counted("CONFLICT", tenant)

    # when the provider reports the second payment taken under the same event id
    reused = signed(second_payment, event_id="evt_x")
    with django_capture_on_commit_callbacks(execute=True):
        answer = deliver(*reused)

    # then it is not swallowed as a duplicate: a conflict for staff, nothing applied
    assert answer == {
        "result": "conflict",
        "order_id": str(second.pk),
        "order_status": "PAYING",
        "conflict": "event_id_reused",
    }
    assert status_of(second) == (S.PAYING, Payment.Status.PENDING)
    assert status_of(first) == (S.PAID, Payment.Status.SUCCEEDED)
    [conflict] = ProviderConflict.objects.for_tenant(tenant)
    assert (conflict.kind, conflict.order_id, conflict.payment_id, conflict.event_id) == (
        REUSED,
        second.pk,
        second_payment.pk,
        "evt_x",
    )
    assert (conflict.reported_status, conflict.reported_amount, conflict.resolved) == (
        "succeeded",
        Decimal("12.00"),
        False,
    )
    # staff decide: the platform refunds nothing of it by itself
    assert not Compensation.objects.for_tenant(tenant).exists()
    assert not Payment.all_tenants.get(pk=second_payment.pk).unwanted_capture
    # the inbox keeps the first event alone; audited and counted as a conflict
    assert list(PaymentCallback.objects.for_tenant(tenant).values_list("payment_id")) == [
        (first_payment.pk,)
    ]
    assert reasons("CONFLICT") == ["event_id_reused"]
    assert _counted("CONFLICT", tenant) - conflicts_counted == 1

    # and a redelivery of either event is a duplicate: no second conflict
    assert deliver(*reused)["result"] == "duplicate"
    assert deliver(*signed(first_payment, event_id="evt_x"))["result"] == "duplicate"
    assert ProviderConflict.objects.for_tenant(tenant).count() == 1
    assert reasons("HIT") == ["conflict_already_recorded", "event_already_received"]
    assert (
        OutboxEvent.objects.for_tenant(tenant).filter(event_type=EventType.ORDER_PAID).count() == 1
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"status": "failed"}, id="status"),
        pytest.param({"amount": Decimal("1.00")}, id="amount"),
        pytest.param({"currency": "USD"}, id="currency"),
    ],
)
def test_an_event_id_reused_with_another_report_of_the_same_payment_is_a_conflict(
    tenant, menu, change
):
    # given a payment whose decline arrived as evt_x (or its capture, for a changed status)
    order, payment = paying_order(tenant, menu["pizza"])
    status = "succeeded" if change.get("status") == "failed" else "failed"
    assert deliver(*signed(payment, status=status, event_id="evt_x"))["result"] == "applied"

    # when evt_x comes again saying something else of the same payment
    reused = signed(payment, event_id="evt_x", **{"status": "succeeded", **change})
    answer = deliver(*reused)

    # then a conflict, recorded once, and nothing of it applied
    assert (answer["result"], answer["conflict"]) == ("conflict", "event_id_reused")
    assert deliver(*reused)["result"] == "duplicate"
    [conflict] = ProviderConflict.objects.for_tenant(tenant)
    assert (conflict.kind, conflict.payment_id) == (REUSED, payment.pk)
    assert status_of(order) == (
        (S.PAYING, Payment.Status.FAILED)
        if status == "failed"
        else (S.PAID, Payment.Status.SUCCEEDED)
    )
    assert PaymentCallback.objects.for_tenant(tenant).get().status == status


@pytest.mark.django_db
def test_an_event_sent_again_with_its_amount_written_otherwise_is_still_a_duplicate(tenant, menu):
    # given an event received with its amount written with two decimals
    order, payment = paying_order(tenant, menu["pizza"])
    assert deliver(*signed(payment, event_id="evt_x"))["result"] == "applied"

    # when the provider sends it again, its amount written as the same number otherwise
    for written in ("9.5", "9.500", "950e-2"):
        again = deliver(*signed(payment, event_id="evt_x", amount=written))

        # then it is the same event: a duplicate, no conflict for staff
        assert again["result"] == "duplicate", written
    assert not ProviderConflict.objects.for_tenant(tenant).exists()
    assert status_of(order) == (S.PAID, Payment.Status.SUCCEEDED)


@pytest.mark.django_db(transaction=True)
def test_two_events_under_one_id_at_the_same_instant_apply_one_and_record_the_other(tenant, menu):
    # given three pairs of orders waiting for their payments
    pairs = [
        tuple(paying_order(tenant, menu[dish])[1] for dish in ("pizza", "pasta")) for _ in range(3)
    ]
    for round_, payments in enumerate(pairs):
        # when the provider reports both of a pair taken under one event id, at once, each
        # delivery on its own connection
        callbacks = [signed(payment, event_id=f"evt_{round_}") for payment in payments]
        answers = at_once(*[lambda c=c: deliver(*c) for c in callbacks])

        # then one is applied and the other is a conflict for staff
        assert sorted(a["result"] for a in answers) == ["applied", "conflict"], answers
        paid = [Payment.all_tenants.get(pk=p.pk).status == "succeeded" for p in payments]
        assert sorted(paid) == [False, True]
        [conflict] = ProviderConflict.all_tenants.filter(event_id=f"evt_{round_}")
        assert conflict.payment_id == payments[paid.index(False)].pk
        assert PaymentCallback.all_tenants.filter(event_id=f"evt_{round_}").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_event_waiting_on_another_under_its_id_is_a_conflict_once_that_commits(tenant, menu):
    # given the provider's evt_x about one payment being applied, not committed yet
    first, first_payment = paying_order(tenant, menu["pizza"])
    second, second_payment = paying_order(tenant, menu["pasta"])
    event = SimulatedProvider().parse_callback(signed(first_payment, event_id="evt_x")[0])

    # when evt_x about the other payment arrives meanwhile, and waits on the first's inbox row
    with committed_once_waited_on(lambda: apply_provider_event(provider="simulated", event=event)):
        answer = deliver(*signed(second_payment, event_id="evt_x"))

    # then, once the first commits, it is a conflict: one order paid, one waiting for staff
    assert (answer["result"], answer["conflict"]) == ("conflict", "event_id_reused")
    assert status_of(first) == (S.PAID, Payment.Status.SUCCEEDED)
    assert status_of(second) == (S.PAYING, Payment.Status.PENDING)
    assert ProviderConflict.all_tenants.get().payment_id == second_payment.pk


@pytest.mark.django_db(transaction=True)
def test_an_event_waiting_on_another_under_its_id_applies_when_that_rolls_back(tenant, menu):
    # given the provider's evt_x about one payment in a transaction that will roll back
    first, first_payment = paying_order(tenant, menu["pizza"])
    second, second_payment = paying_order(tenant, menu["pasta"])
    event = SimulatedProvider().parse_callback(signed(first_payment, event_id="evt_x")[0])
    started = threading.Event()

    def rolled_back() -> None:
        try:
            with transaction.atomic():
                apply_provider_event(provider="simulated", event=event)
                started.set()
                wait_until(lambda: waiting_on_me() > 0, what="the other event waiting")
                transaction.set_rollback(True)
        finally:
            connection.close()

    elsewhere = threading.Thread(target=rolled_back)
    elsewhere.start()
    assert started.wait(DEADLINE_SECONDS)
    # when evt_x about the other payment arrives meanwhile
    answer = deliver(*signed(second_payment, event_id="evt_x"))
    elsewhere.join(DEADLINE_SECONDS)

    # then it is the event the inbox keeps: applied, the only one
    assert answer["result"] == "applied"
    assert status_of(second) == (S.PAID, Payment.Status.SUCCEEDED)
    assert status_of(first) == (S.PAYING, Payment.Status.PENDING)
    assert not ProviderConflict.all_tenants.exists()
    assert PaymentCallback.all_tenants.get().payment_id == second_payment.pk


@pytest.mark.django_db
def test_reconciliation_finds_a_capture_whose_event_id_was_used_before_and_records_it_once(
    tenant, menu, settings
):
    # given a callback about one payment under the event id the provider's record of another
    # payment carries, and that other payment taken with its callback lost
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0
    _, first_payment = paying_order(tenant, menu["pizza"])
    order, payment = paying_order(tenant, menu["pasta"])
    complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id, deliver=False
    )
    its_event_id = SimulatedProvider().settled_event(payment=payment).event_id
    assert deliver(*signed(first_payment, event_id=its_event_id))["result"] == "applied"

    # when reconciliation asks the provider about it, then asks again
    first_run = reconcile_payments(now=_later(1))
    second_run = reconcile_payments(now=_later(3600))

    # then its capture is a conflict for staff, once; the order is not paid by it
    assert first_run == {"conflict": 1}
    assert second_run == {"duplicate": 1}
    [conflict] = ProviderConflict.objects.for_tenant(tenant)
    assert (conflict.kind, conflict.payment_id) == (REUSED, payment.pk)
    assert status_of(order) == (S.PAYING, Payment.Status.PENDING)


@pytest.mark.django_db
def test_staff_and_the_restaurant_see_a_reused_event_id_and_what_it_was_first(tenant, menu):
    # given a capture reported under an event id received before for another order
    first, first_payment = paying_order(tenant, menu["pizza"])
    order, payment = paying_order(tenant, menu["pasta"])
    deliver(*signed(first_payment, event_id="evt_x"))
    deliver(*signed(payment, event_id="evt_x"))
    [conflict] = ProviderConflict.objects.for_tenant(tenant)

    # then the alert's gauge counts it as waiting for staff, under its kind
    waiting = database_registry().get_sample_value(
        "ordering_provider_conflicts_waiting", {"kind": "event_id_reused"}
    )
    assert waiting == 1.0
    # and the admin lists it under its kind, its page naming the event first received
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x-123456789"))
    listed = staff.get(
        "/admin/ordering/providerconflict/", {"state": "waiting", "kind__exact": REUSED}
    )
    assert [c.pk for c in listed.context["cl"].result_list] == [conflict.pk]
    page = staff.get(f"/admin/ordering/providerconflict/{conflict.pk}/change/").content.decode()
    assert (
        f"order {first.pk}, transaction {first_payment.provider_txn_id}: succeeded 9.50 EUR" in page
    )
    # and the restaurant sees the order's payment under review, in plain words
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))
    board = merchant.get("/dashboard/").content.decode()
    assert "1 payment under review" in board
    assert f'href="/dashboard/orders/{order.pk}/"' in board
    assert "reused the id of an earlier report" in board


def _later(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def _counted(outcome: str, tenant) -> float:
    labels = {"tenant": str(tenant.pk), "endpoint": AUDIT_ENDPOINT, "outcome": outcome}
    return REGISTRY.get_sample_value("idempotency_outcomes_total", labels) or 0.0
