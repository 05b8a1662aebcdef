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
    ProviderConflict,
    TenantOffboarding,
)
from ordering.payments.base import CallbackEvent, ProviderError
from ordering.payments.due_checks import overdue_seconds, unanswered_seconds
from ordering.payments.reconciliation import reconcile_payments
from ordering.payments.simulated import SimulatedProvider, complete_payment
from ordering.services.lifecycle import cancel_order
from tenants.models import Tenant
from tests.conftest import menu_for
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
def test_an_open_payment_is_asked_again_after_its_age(tenant, menu):
    order, _ = paying_order(tenant, menu["pizza"])  # the diner has not paid
    first = AFTER + 5
    assert reconcile_payments(now=later(first)) == {"open": 1}
    # the next check is put off by the payment's age then (about ten minutes)
    assert reconcile_payments(now=later(2 * first - 10)) == {}
    assert reconcile_payments(now=later(2 * first + 10)) == {"open": 1}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAYING
    # past the longest a provider keeps a payment open, it is no longer asked about
    assert reconcile_payments(now=later(7 * 86400 + 10)) == {}


@pytest.mark.django_db
def test_a_week_of_an_abandoned_payment_is_a_dozen_asks_not_thousands(tenant, menu):
    paying_order(tenant, menu["pizza"])
    asked = sum(
        reconcile_payments(now=later(minute * 60)).get("open", 0)
        for minute in range(0, 7 * 24 * 60, 5)  # a run every 5 minutes for a week
    )
    assert 8 <= asked <= 12  # red with a fixed recheck: 2,000


@pytest.mark.django_db
def test_a_declined_payment_is_failed_and_a_later_payment_still_found(tenant, menu):
    order, payment = paying_order(tenant, menu["pizza"])
    txn = {"provider_name": payment.provider, "provider_txn_id": payment.provider_txn_id}
    complete_payment(**txn, status="failed", deliver=False)
    assert reconcile_payments(now=later(AFTER + 5)) == {"applied": 1}
    payment.refresh_from_db()
    order.refresh_from_db()
    assert payment.status == Payment.Status.FAILED and order.status == OrderStatus.PAYING
    # the diner tries another card, which pays; that callback is lost too
    complete_payment(**txn, status="succeeded", deliver=False)
    assert reconcile_payments(now=later(3 * AFTER)) == {"applied": 1}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID and paid_events(order) == 1


@pytest.mark.django_db
def test_money_taken_for_an_order_cancelled_meanwhile_goes_to_staff(tenant, menu):
    order, payment = paid_without_callback(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")  # unpaid, as we know it
    # the provider says the diner paid: a conflict for staff (red: never found)
    assert reconcile_payments(now=later(AFTER + 5)) == {"conflict": 1}
    conflict = ProviderConflict.all_tenants.get(order=order)
    assert conflict.kind == ProviderConflict.Kind.PAID_AFTER_CANCEL
    # then nothing more to ask, and the late callback is that event again
    assert reconcile_payments(now=later(7 * AFTER)) == {}
    late = complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    assert late.outcome == "duplicate"
    assert ProviderConflict.all_tenants.filter(order=order).count() == 1


@pytest.mark.django_db
def test_a_success_reported_with_another_amount_is_asked_about_and_the_order_paid(tenant, menu):
    """A success event whose amount is not the payment's is a conflict that leaves it pending;
    the provider's own record is then asked, and pays the order (red: the reported success
    counted as heard, so the order stayed PAYING for good, its payment never asked about).
    Another such event is the same conflict, not a second one for staff."""
    order, payment = paid_without_callback(tenant, menu["pizza"])
    client = APIClient()
    for event_id in ("evt_wrong", "evt_wrong_again"):
        wrong = post_callback(
            client, *signed(payment, event_id=event_id, amount=payment.amount - 1)
        )
        assert wrong.json()["result"] in ("conflict", "duplicate")
    assert ProviderConflict.all_tenants.filter(payment=payment).count() == 1
    assert reconcile_payments(now=later(AFTER + 5)) == {"applied": 1}
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == OrderStatus.PAID and payment.status == Payment.Status.SUCCEEDED
    assert paid_events(order) == 1


@pytest.mark.django_db
def test_a_provider_that_cannot_be_asked_is_asked_again_soon_and_said_so(tenant, menu):
    _, payment = paying_order(tenant, menu["pizza"])
    Payment.all_tenants.filter(pk=payment.pk).update(provider="gone")  # no longer configured
    assert reconcile_payments(now=later(AFTER + 5)) == {"unreachable": 1}
    payment.refresh_from_db()
    assert payment.checked_at is None and payment.unanswered_since is not None
    assert reconcile_payments(now=later(AFTER + 5 + RECHECK + 5)) == {"unreachable": 1}
    payment.refresh_from_db()
    # how long it has gone unanswered is counted from the first ask, and grows
    assert 890 < unanswered_seconds(later(AFTER + 905)) < 910


class Erratic(SimulatedProvider):
    """A provider whose status page fails, whose adapter has a bug, or that names another
    order than the payment's."""

    def settled_event(self, *, payment: Payment) -> CallbackEvent | None:
        if payment.method == "down":
            raise ProviderError("503 from the provider")
        if payment.method == "bug":
            raise ValueError("the adapter's own bug")
        event = SimulatedProvider.settled_event(self, payment=payment)
        return event and replace(event, order_id=event.order_id + 1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "counted"), [("down", "unreachable"), ("bug", "unreachable"), ("card", "refused")]
)
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


class MixedUp(SimulatedProvider):
    """A provider (or its adapter) that answers about the payment asked with the books of
    another payment of ours: the newest other one of the tenant."""

    def settled_event(self, *, payment: Payment) -> CallbackEvent | None:
        event = SimulatedProvider.settled_event(self, payment=payment)
        other = Payment.all_tenants.filter(tenant=payment.tenant_id).exclude(pk=payment.pk)
        named = other.latest("pk")
        return event and replace(
            event, order_id=named.order_id, provider_txn_id=named.provider_txn_id
        )


@pytest.mark.django_db
def test_an_answer_about_another_payment_than_the_one_asked_is_refused(tenant, menu, settings):
    """Reconciliation applied whatever payment the provider's answer named: an answer about
    another of our payments (a provider's or its adapter's mix-up) marked that one's order
    PAID with no money taken for it, and put the event id of the payment asked about in the
    inbox under the other, so the asked payment's own callback was then refused as a
    reused id. An answer is applied only when it is about the payment asked (as a callback
    is about the payment it names), else refused, nothing written."""
    settings.PAYMENT_PROVIDERS = {
        **settings.PAYMENT_PROVIDERS,
        "mixed": {"ADAPTER": f"{__name__}.MixedUp", "SECRETS": ["s"]},
    }
    # given a payment taken at the provider, its callback lost, and another order of ours
    # waiting for a payment the diner has not made
    order, payment = paid_without_callback(tenant, menu["pizza"])
    other, other_payment = paying_order(tenant, menu["pizza"])
    Payment.all_tenants.filter(pk__in=[payment.pk, other_payment.pk]).update(provider="mixed")

    # when reconciliation asks about the taken payment and the answer names the other one
    counts = reconcile_payments(now=later(AFTER + 5))

    # then nothing is applied: the other order is not paid with money nobody took
    assert counts == {"refused": 1, "open": 1}
    for each in (order, other):
        each.refresh_from_db()
        assert each.status == OrderStatus.PAYING
    assert not PaymentCallback.all_tenants.exists()


@pytest.mark.django_db
def test_payments_that_cannot_be_asked_about_do_not_hold_up_the_others(tenant, menu, settings):
    settings.PAYMENT_PROVIDERS = {
        **settings.PAYMENT_PROVIDERS,
        "erratic": {"ADAPTER": f"{__name__}.Erratic", "SECRETS": ["s"]},
    }
    for method in ["down", "bug"] * 3:  # six, due before the one whose callback was lost
        _, stuck = paying_order(tenant, menu["pizza"])
        Payment.all_tenants.filter(pk=stuck.pk).update(
            provider="erratic", method=method, created_at=timezone.now() - timedelta(hours=1)
        )
    order, _ = paid_without_callback(tenant, menu["pizza"])
    runs = [reconcile_payments(batch=4, now=later(AFTER + 5 + minute * 60)) for minute in range(3)]
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID, runs  # red: the same four first every run
    assert sum(run.get("unreachable", 0) for run in runs) == 6


@pytest.mark.django_db
def test_the_metrics_show_pending_payments_and_how_late_their_check_is(tenant, menu):
    def scraped(name: str) -> float:
        for line in generate_latest(database_registry()).decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(name)

    assert scraped("ordering_payments_pending") == 0
    assert scraped("ordering_payments_pending_oldest_seconds") == 0
    _, payment = paying_order(tenant, menu["pizza"])
    assert scraped("ordering_payments_pending") == 1
    assert 0 <= scraped("ordering_payments_pending_oldest_seconds") < 60
    assert scraped("ordering_payments_reconcile_overdue_seconds") == 0  # not due yet
    Payment.all_tenants.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(seconds=AFTER + 120)
    )
    assert 119 <= scraped("ordering_payments_reconcile_overdue_seconds") < 200
    # the age of the oldest payment still waiting (PaymentPendingForADay tickets past a day)
    assert AFTER + 119 <= scraped("ordering_payments_pending_oldest_seconds") < AFTER + 200
    reconcile_payments()
    assert scraped("ordering_payments_reconcile_overdue_seconds") == 0  # asked: due again later
    assert scraped("ordering_payments_unanswered_seconds") == 0
    assert overdue_seconds(later(AFTER + 120 + 60)) >= 59  # after its age, it is due again


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
        # one of them applies it; the other is a duplicate, or, on a busy machine where the
        # callback had committed before reconciliation read the due payments, never asked
        assert outcomes in (["applied", "duplicate"], ["applied"]), (reconciled, posted)
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_eager")
def test_a_capture_found_as_the_restaurant_s_tables_close_is_refunded_and_the_run_goes_on(
    tenant, menu, monkeypatch, tmp_path
):
    """Reconciliation asks about a payment, and the restaurant's offboarding closes its tables
    before the answer is written down: the fence refused the run's bookkeeping of the ask,
    which ended the whole run with the fence's error (a traceback from the command, the beat
    task failed), the capture the provider reported never applied, and the other payments
    due not asked. The answer now goes on to the departed payment's path: the capture is
    refunded once by the platform, and the next payment is asked."""
    from ordering.models import DepartedPayment, SimulatedOperation
    from ordering.privacy.offboarding import run_offboarding, start_offboarding

    # given a diner who paid at the provider (the callback lost), then cancelled the order,
    # and another restaurant's payment whose callback was lost too
    order, payment = paid_without_callback(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED
    other = Tenant.objects.create(slug="staying", name="Staying")
    other_order, _ = paid_without_callback(other, menu_for(other)["pizza"])  # asked second
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    asked = SimulatedProvider.settled_event

    def tables_close_meanwhile(self, *, payment):
        answer = asked(self, payment=payment)
        if payment.tenant_id == tenant.pk:  # the suspension commits while the provider answers
            assert run_offboarding(job.pk, max_steps=1).phase == TenantOffboarding.Phase.EXPORT
        return answer

    monkeypatch.setattr(SimulatedProvider, "settled_event", tables_close_meanwhile)
    # when reconciliation runs
    counts = reconcile_payments(now=later(AFTER + 5))
    # then the capture is the departed payment's, refunded once from the platform's account,
    # and the other restaurant's order is paid in the same run
    assert counts == {"conflict": 1, "applied": 1}
    row = DepartedPayment.objects.get(provider_txn_id=payment.provider_txn_id)
    assert row.refund == DepartedPayment.Refund.DONE
    assert list(
        SimulatedOperation.objects.filter(
            kind="refund", reference=payment.provider_txn_id
        ).values_list("tenant_id", "calls")
    ) == [(None, 1)]
    other_order.refresh_from_db()
    assert other_order.status == OrderStatus.PAID
