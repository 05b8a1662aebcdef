"""A payment whose callback never came: reconciliation asks the provider and pays the order once,
whether the late callback arrives after it, or at the same instant."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from prometheus_client import generate_latest
from rest_framework.test import APIClient

from ordering.metrics import database_registry
from ordering.models import (
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    PaymentCallback,
)
from ordering.payments.base import CallbackEvent, ProviderError
from ordering.payments.due_checks import overdue_seconds
from ordering.payments.reconciliation import reconcile_payments
from ordering.payments.simulated import SimulatedProvider, complete_payment
from ordering.services.lifecycle import cancel_order
from tests.payments.helpers import paying_order, post_callback, signed
from tests.support.concurrency import at_once

AFTER, RECHECK = 600, 300


@pytest.fixture(autouse=True)
def windows(settings):
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = AFTER
    settings.PAYMENT_RECONCILE_RECHECK_SECONDS = RECHECK
    settings.PAYMENT_RECONCILE_MAX_AGE_SECONDS = 7 * 86400


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


def paid_without_callback(tenant, dish) -> tuple[Order, Payment]:
    """The diner paid at the provider; the callback was lost."""
    order, payment = paying_order(tenant, dish)
    assert (
        complete_payment(
            provider_name=payment.provider, provider_txn_id=payment.provider_txn_id, deliver=False
        )
        is None
    )
    return order, payment


def paid_events(order: Order) -> int:
    return OutboxEvent.all_tenants.filter(order=order, event_type=EventType.ORDER_PAID).count()


@pytest.mark.django_db
def test_a_lost_callback_is_found_and_the_order_paid_once(tenant, menu):
    order, payment = paid_without_callback(tenant, menu["pizza"])
    # not asked about before the provider had its time to call back
    assert reconcile_payments(now=later(AFTER - 5)) == {}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAYING

    assert reconcile_payments(now=later(AFTER + 5)) == {"applied": 1}
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == OrderStatus.PAID and payment.status == Payment.Status.SUCCEEDED
    assert paid_events(order) == 1
    assert OrderTransition.all_tenants.filter(order=order, to_status="PAID").count() == 1

    # the callback arrives after all: a duplicate of the event reconciliation applied
    late = complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    assert late.outcome == "duplicate"
    # and a paid payment is not asked about again
    assert reconcile_payments(now=later(AFTER + RECHECK + 10)) == {}
    assert paid_events(order) == 1
    assert PaymentCallback.all_tenants.filter(payment=payment).count() == 1


@pytest.mark.django_db
def test_an_open_payment_is_asked_again_only_after_the_recheck(tenant, menu):
    order, _ = paying_order(tenant, menu["pizza"])  # the diner has not paid
    assert reconcile_payments(now=later(AFTER + 5)) == {"open": 1}
    assert reconcile_payments(now=later(AFTER + 5 + RECHECK - 10)) == {}
    assert reconcile_payments(now=later(AFTER + 5 + RECHECK + 10)) == {"open": 1}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAYING
    # past the longest a provider keeps a payment open, it is no longer asked about
    assert reconcile_payments(now=later(7 * 86400 + 10)) == {}


@pytest.mark.django_db
def test_a_declined_payment_is_failed(tenant, menu):
    order, payment = paying_order(tenant, menu["pizza"])
    complete_payment(
        provider_name=payment.provider,
        provider_txn_id=payment.provider_txn_id,
        status="failed",
        deliver=False,
    )
    assert reconcile_payments(now=later(AFTER + 5)) == {"applied": 1}
    payment.refresh_from_db()
    order.refresh_from_db()
    assert payment.status == Payment.Status.FAILED and order.status == OrderStatus.PAYING


@pytest.mark.django_db
def test_a_payment_found_after_the_order_was_cancelled_goes_to_staff(tenant, menu):
    order, payment = paid_without_callback(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")  # unpaid, as we know it
    assert reconcile_payments(now=later(AFTER + 5)) == {}  # a voided payment is not pending
    # the late callback is the provider's word: money taken for a cancelled order, for staff
    late = complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    assert late.outcome == "conflict"


@pytest.mark.django_db
def test_a_provider_that_cannot_be_asked_leaves_the_payment_due(tenant, menu, settings):
    _, payment = paying_order(tenant, menu["pizza"])
    Payment.all_tenants.filter(pk=payment.pk).update(provider="gone")  # no longer configured
    assert reconcile_payments(now=later(AFTER + 5)) == {"unreachable": 1}
    payment.refresh_from_db()
    assert payment.checked_at is None
    # how late the check is grows until it is answered
    assert 0 < overdue_seconds(later(AFTER + 5)) < overdue_seconds(later(AFTER + 905)) < 1000


class Erratic(SimulatedProvider):
    """A provider whose status page fails, or names another order than the payment's."""

    def settled_event(self, *, payment: Payment) -> CallbackEvent | None:
        if payment.method == "down":
            raise ProviderError("503 from the provider")
        event = SimulatedProvider.settled_event(self, payment=payment)
        return event and replace(event, order_id=event.order_id + 1)


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "counted"), [("down", "unreachable"), ("card", "refused")])
def test_a_provider_failing_or_naming_another_order_changes_nothing(
    tenant, menu, settings, method, counted
):
    settings.PAYMENT_PROVIDERS = {
        **settings.PAYMENT_PROVIDERS,
        "erratic": {"ADAPTER": f"{__name__}.Erratic", "SECRETS": ["s"]},
    }
    order, payment = paid_without_callback(tenant, menu["pizza"])
    Payment.all_tenants.filter(pk=payment.pk).update(provider="erratic", method=method)
    other, _ = paying_order(tenant, menu["pizza"])  # the order the answer names instead
    assert reconcile_payments(now=later(AFTER + 5)).get(counted) == 1
    for each in (order, other):
        each.refresh_from_db()
        assert each.status == OrderStatus.PAYING
    assert not PaymentCallback.all_tenants.exists()


@pytest.mark.django_db
def test_the_metrics_show_pending_payments_and_how_late_their_check_is(tenant, menu):
    def scraped(name: str) -> float:
        for line in generate_latest(database_registry()).decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(name)

    assert scraped("ordering_payments_pending") == 0
    _, payment = paying_order(tenant, menu["pizza"])
    assert scraped("ordering_payments_pending") == 1
    assert scraped("ordering_payments_reconcile_overdue_seconds") == 0  # not due yet
    Payment.all_tenants.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(seconds=AFTER + 120)
    )
    assert 119 <= scraped("ordering_payments_reconcile_overdue_seconds") < 200
    reconcile_payments()
    assert scraped("ordering_payments_reconcile_overdue_seconds") == 0  # asked: due again later
    assert overdue_seconds(later(RECHECK + 60)) >= 59


@pytest.mark.django_db
def test_the_command_prints_what_came_of_each_payment(tenant, menu, settings):
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0
    paid_without_callback(tenant, menu["pizza"])
    paying_order(tenant, menu["pizza"])
    out = StringIO()
    call_command("reconcile_payments", stdout=out)
    assert json.loads(out.getvalue()) == {"applied": 1, "open": 1}


@pytest.mark.django_db(transaction=True)
def test_reconciliation_and_the_late_callback_at_the_same_instant_pay_once(tenant, menu, settings):
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0
    for _ in range(5):  # a few rounds: the two meet in either order
        order, payment = paid_without_callback(tenant, menu["pizza"])
        body, headers = signed(payment, event_id=f"evt_{payment.provider_txn_id}_succeeded")
        reconciled, posted = at_once(
            reconcile_payments, lambda b=body, h=headers: post_callback(APIClient(), b, h)
        )
        outcomes = sorted([posted.json()["result"], *reconciled])
        assert outcomes == ["applied", "duplicate"], (reconciled, posted)
        order.refresh_from_db()
        assert order.status == OrderStatus.PAID and paid_events(order) == 1


@pytest.mark.django_db
def test_the_demo_can_lose_a_callback_and_reconciliation_finds_it(tenant, menu, settings):
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0
    order, _ = paying_order(tenant, menu["pizza"])
    out = StringIO()
    call_command("simulate_payment", str(order.pk), "--lose-callback", stdout=out)
    assert "no callback sent" in out.getvalue()
    order.refresh_from_db()
    assert order.status == OrderStatus.PAYING
    assert reconcile_payments() == {"applied": 1}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID


def test_beat_runs_reconciliation_as_a_registered_task(settings):
    from config.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["reconcile-payments"]
    app.loader.import_default_modules()  # what a worker does as it starts
    assert entry["task"] in app.tasks and entry["schedule"] == settings.PAYMENT_RECONCILE_SECONDS
