"""Money the provider took that no order wanted (captured after a cancel, or a second payment)
goes back to the diner by itself, once: never twice, never beside the cancel's own refund, and
never after staff settled it by hand."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from django.utils.html import escape
from rest_framework.test import APIClient

from ordering.background import dispatch, tasks
from ordering.background.dead_letters import DeadLetterNotOpen, requeue_dead_letter
from ordering.background.saga import SagaOutcome, run_cancel_saga
from ordering.background.steps import RetryLater, begin_attempt, mark_done, step_failed
from ordering.models import (
    Compensation,
    DeadLetter,
    EventType,
    Order,
    OrderStatus,
    OutboxEvent,
    Payment,
    ProviderConflict,
    SalesDay,
    SimulatedOperation,
)
from ordering.payments import capture_refunds
from ordering.payments.base import ProviderError
from ordering.payments.capture_refunds import (
    CaptureRefundRunning,
    RefundOutcome,
    capture_refund_id,
    refund_unwanted_capture,
    resend_due_capture_refunds,
)
from ordering.payments.conflicts import ConflictNotOpen, resolve_conflict
from ordering.payments.simulated import complete_payment, signed_callback
from ordering.services.lifecycle import cancel_order
from ordering.services.payments import pay_order
from ordering.simulation import plan_fault
from tenants.models import ApiClient
from tests.conftest import api_for
from tests.dashboard.factories import make_merchant
from tests.payments.helpers import paying_order, post_callback
from tests.support.broker import sending_to
from tests.support.concurrency import at_once
from tests.support.database_gone import session_ended_before
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.django_db
S, P = OrderStatus, Payment.Status
Kind = ProviderConflict.Kind


def refunds() -> list[tuple[str, str, Decimal]]:
    """Refunds the simulated provider made: (payment's txn id, idempotency key, amount)."""
    return list(
        SimulatedOperation.objects.filter(kind="refund")
        .order_by("pk")
        .values_list("reference", "idempotency_key", "amount")
    )


def capture(payment: Payment, *, event_id: str | None = None, **reported: object) -> str:
    """The provider's signed "succeeded" callback for ``payment`` (``reported``: another
    ``amount``, say); the webhook's result."""
    body, headers = signed_callback(
        payment=payment, event_id=event_id or uuid.uuid4().hex, **reported
    )
    return post_callback(APIClient(), body, headers).json()["result"]


def paid_by_a_declined_payment(tenant, dish) -> tuple[Order, Payment, Payment]:
    """An order paid again after a declined card, the declined payment then taken after all
    (paying the order, the second one voided): the order, the first and the second payment."""
    order, first = paying_order(tenant, dish)
    complete_payment(
        provider_name=first.provider, provider_txn_id=first.provider_txn_id, status="failed"
    )
    order, second = pay_order(tenant=tenant, order_id=order.pk, actor="diner")
    assert capture(first) == "applied"
    return order, first, second


@pytest.fixture
def cancelled_then_captured(tenant, menu, django_capture_on_commit_callbacks):
    """An order cancelled while its payment was pending, then the provider's capture of it,
    delivered with what its transaction scheduled after commit (the refund's task, eager)."""
    order, payment = paying_order(tenant, menu["pizza"], quantity=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with django_capture_on_commit_callbacks(execute=True):
        result = capture(payment)
    assert result == "conflict"
    return order, payment


def test_money_taken_after_the_cancel_is_refunded_once_and_its_conflict_closes(
    cancelled_then_captured, tenant
):
    order, payment = cancelled_then_captured
    # then the provider refunded the capture, once, under the step's own key
    assert refunds() == [(payment.provider_txn_id, capture_refund_id(payment.pk), Decimal("19.00"))]
    payment.refresh_from_db()
    order.refresh_from_db()
    assert (order.status, payment.status, payment.unwanted_capture) == (
        S.CANCELLED,
        P.REFUNDED,
        True,
    )
    # and staff find the conflict resolved by the platform, with the refund named
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    assert (conflict.kind, conflict.resolved, conflict.outcome, conflict.resolved_by) == (
        Kind.PAID_AFTER_CANCEL,
        True,
        ProviderConflict.Outcome.REFUNDED,
        "platform:capture-refund",
    )
    assert "sim_re_" in conflict.resolution_note and "19.00 EUR" in conflict.resolution_note
    # and the sales book is untouched: the money was never a sale
    assert not SalesDay.objects.for_tenant(tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_a_refund_the_database_outage_caught_is_retried_by_its_task_and_made_once(
    tenant, menu, monkeypatch
):
    """The database ends the worker's session as the refund asks the provider: the task tries
    again (it was counted as a failure of the step; now an outage spends no retry and is
    retried at once by the task, not left for the resend sweep minutes on)."""
    monkeypatch.setattr(dispatch, "enqueue", _broker_down)  # the task runs here, not at commit
    order, payment = paying_order(tenant, menu["pizza"], quantity=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    assert capture(payment) == "conflict"
    compensation_id = capture_refund_id(payment.pk)

    with session_ended_before('"ordering_simulatedoperation"'):
        run = tasks.refund_unwanted_capture.apply(args=[compensation_id])

    assert run.successful(), run.result
    assert run.result == RefundOutcome.REFUNDED
    assert refunds() == [(payment.provider_txn_id, compensation_id, Decimal("19.00"))]
    step = Compensation.objects.for_tenant(tenant).get(compensation_id=compensation_id)
    assert (step.status, step.attempts) == (Compensation.Status.DONE, 1)


def _broker_down(*args: object, **kwargs: object) -> None:
    raise dispatch.BrokerUnavailable("down")


def test_the_same_capture_reported_again_or_the_refund_run_again_moves_no_money(
    cancelled_then_captured, tenant, django_capture_on_commit_callbacks
):
    _, payment = cancelled_then_captured
    # when the provider reports the capture again under another event id
    with django_capture_on_commit_callbacks(execute=True):
        assert capture(payment) == "duplicate"
    # and the refund's message is delivered again
    assert refund_unwanted_capture(compensation_id=capture_refund_id(payment.pk)) == (
        RefundOutcome.ALREADY_DONE
    )
    # then there is still one refund, one conflict, one step
    assert len(refunds()) == 1
    assert ProviderConflict.objects.for_tenant(tenant).count() == 1
    step = Compensation.objects.for_tenant(tenant).get(step=Compensation.Step.REFUND_CAPTURE)
    assert (step.status, step.attempts) == ("done", 1)


def test_a_second_payment_taken_is_refunded_and_the_cancel_refunds_only_the_one_that_paid(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given an order paid again after a decline, the declined payment then taken after all
    order, first, second = paid_by_a_declined_payment(tenant, menu["pizza"])
    # when the provider reports the second one taken too
    with django_capture_on_commit_callbacks(execute=True):
        assert capture(second) == "conflict"
    # then that money goes back at once, and the order stays paid by the first
    assert refunds() == [(second.provider_txn_id, capture_refund_id(second.pk), Decimal("9.50"))]
    order.refresh_from_db()
    assert order.status == S.PAID
    # and the restaurant's page of the order shows the payment that paid it first, the one
    # refunded marked as not the order's
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))
    page = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
    assert page.index(first.provider_txn_id) < page.index(second.provider_txn_id)
    assert page.count("not this order's payment") == 1
    # and when the diner cancels the order, the saga refunds the payment that paid it, only
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order=order, event_type=EventType.CANCEL_REQUESTED
    )
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert sorted(reference for reference, _, _ in refunds()) == sorted(
        [first.provider_txn_id, second.provider_txn_id]
    )
    assert dict(Payment.objects.for_tenant(tenant).values_list("pk", "status")) == {
        first.pk: P.REFUNDED,
        second.pk: P.REFUNDED,
    }
    # and the order's answer shows the payment that paid it
    shown = (
        api_for(tenant, kind=ApiClient.Kind.MERCHANT)
        .get(f"/api/v1/orders/{order.pk}/")
        .json()["payment"]
    )
    assert shown["provider_txn_id"] == first.provider_txn_id


def test_a_capture_reported_paid_twice_and_again_after_the_cancel_is_one_refund(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given a second payment's capture recorded as paid twice, its refund's message not yet run
    order, _, second = paid_by_a_declined_payment(tenant, menu["pizza"])
    with django_capture_on_commit_callbacks(execute=False):
        assert capture(second) == "conflict"
    # when the order is cancelled and the provider reports the same money again
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    assert capture(second) == "duplicate"
    # then it is the same money: one conflict, one refund step
    assert ProviderConflict.objects.for_tenant(tenant).filter(payment=second).count() == 1
    assert (
        Compensation.objects.for_tenant(tenant)
        .filter(step=Compensation.Step.REFUND_CAPTURE)
        .count()
        == 1
    )


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_the_refund_at_once_refund_once(tenant, menu):
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with sending_to("memory://"):
        assert capture(payment) == "conflict"
    compensation_id = capture_refund_id(payment.pk)
    # when two workers run the refund at the same instant (a redelivery beside the first)
    results = at_once(
        lambda: refund_unwanted_capture(compensation_id=compensation_id),
        lambda: refund_unwanted_capture(compensation_id=compensation_id),
    )
    # then one recorded it, and the provider moved the money once
    assert sorted(results) == sorted([RefundOutcome.REFUNDED, RefundOutcome.ALREADY_DONE]), results
    operation = SimulatedOperation.objects.get(kind="refund")
    assert operation.amount == Decimal("9.50")
    payment.refresh_from_db()
    assert payment.status == P.REFUNDED


@pytest.mark.django_db(transaction=True)
def test_a_refund_that_went_through_beside_a_run_giving_up_is_recorded(tenant, menu, settings):
    settings.SAGA_MAX_RETRIES = 0
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with sending_to("memory://"):
        assert capture(payment) == "conflict"
    compensation_id = capture_refund_id(payment.pk)
    # given a provider that fails one call and answers the next slowly, the money moved
    plan_fault(
        order=order,
        step=Compensation.Step.REFUND_PAYMENT,
        fail_times=1,
        delay_times=1,
        delay_seconds=1,
    )
    # when two runs meet (a redelivery beside a retry), one failing its last attempt while
    # the provider refunds the other's
    results = at_once(
        lambda: refund_unwanted_capture(compensation_id=compensation_id),
        lambda: refund_unwanted_capture(compensation_id=compensation_id),
    )
    # then the refund the provider made is what the books say: done, the payment refunded,
    # the conflict closed by the platform, no letter sending staff to refund it by hand
    assert sorted(results) == sorted([RefundOutcome.REFUNDED, RefundOutcome.DEAD_LETTERED])
    assert len(refunds()) == 1
    assert Compensation.all_tenants.get(compensation_id=compensation_id).status == "done"
    payment.refresh_from_db()
    assert payment.status == P.REFUNDED
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    assert (conflict.resolved, conflict.resolved_by) == (True, "platform:capture-refund")
    assert not DeadLetter.objects.filter(state="open").exists()


@pytest.mark.django_db(transaction=True)
def test_a_letter_filed_while_the_refund_was_being_recorded_is_closed(tenant, menu, settings):
    settings.SAGA_MAX_RETRIES = 0
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with sending_to("memory://"):
        assert capture(payment) == "conflict"
    compensation = Compensation.all_tenants.get(compensation_id=capture_refund_id(payment.pk))
    attempt = begin_attempt(compensation)
    filed = threading.Event()

    def last_attempt_fails() -> None:
        try:
            with transaction.atomic():  # failed and dead-lettered, committed a moment later
                step_failed(
                    order=order,
                    compensation=compensation,
                    attempt=attempt,
                    exc=ProviderError("down"),
                    task=dispatch.REFUND_UNWANTED_CAPTURE,
                    payload={"args": [compensation.compensation_id]},
                )
                filed.set()
                time.sleep(0.5)
        finally:
            connection.close()

    def refund_recorded() -> bool:
        filed.wait(5)
        with transaction.atomic():  # waits for the failing run's commit, then records
            return mark_done(compensation, {"refund_id": "sim_re_1"}, acted=True)

    # when another run records the provider's refund while the last attempt's failure commits
    failing = threading.Thread(target=last_attempt_fails)
    failing.start()
    try:
        assert refund_recorded()
    finally:
        failing.join(10)
        connection.close()
    # then the step is done and the letter filed meanwhile closed: nothing sends staff to it
    compensation.refresh_from_db()
    assert compensation.status == "done"
    assert list(DeadLetter.objects.values_list("state", "resolved_by")) == [
        ("discarded", "platform:step")
    ]


@pytest.mark.django_db(transaction=True)
def test_a_refund_that_keeps_failing_waits_for_staff_and_cannot_run_after_they_settle_it(
    tenant, menu, settings
):
    settings.SAGA_MAX_RETRIES = 1
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=10)
    with sending_to("memory://"):  # the refund's message is sent, and not run
        assert capture(payment) == "conflict"
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    compensation_id = capture_refund_id(payment.pk)
    # while the platform's refund is pending, staff cannot resolve the conflict by hand
    with pytest.raises(CaptureRefundRunning):
        resolve_conflict(conflict_id=conflict.pk, outcome="refunded", note="n", actor="staff:a")
    # when the provider fails the first attempt and its one retry
    with pytest.raises(RetryLater):
        refund_unwanted_capture(compensation_id=compensation_id)
    assert refund_unwanted_capture(compensation_id=compensation_id) == (RefundOutcome.DEAD_LETTERED)
    # then staff find a dead letter, and the conflict still open
    letter = DeadLetter.objects.get(key=compensation_id)
    assert (letter.state, letter.attempts, letter.order_id) == ("open", 2, order.pk)
    conflict.refresh_from_db()
    assert not conflict.resolved and not refunds()
    # and the restaurant's page no longer says the platform is refunding it
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))
    page = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
    assert "money was taken after the order was cancelled" in page
    assert "Platform staff will refund or confirm it." in page
    assert "The platform is refunding it to the diner." not in page
    # when staff settle it by hand (refunded at the provider's own dashboard)
    resolve_conflict(
        conflict_id=conflict.pk, outcome="refunded", note="refunded by hand", actor="staff:a"
    )
    # then the platform's refund is closed with it: its letter cannot be requeued, and a
    # message still in flight moves no money
    letter.refresh_from_db()
    assert letter.state == "discarded"
    with pytest.raises(DeadLetterNotOpen):
        requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:b")
    assert refund_unwanted_capture(compensation_id=compensation_id) == (RefundOutcome.ALREADY_DONE)
    assert not refunds()
    conflict.refresh_from_db()
    assert (conflict.resolved_by, conflict.resolution_note) == ("staff:a", "refunded by hand")


@pytest.mark.django_db(transaction=True)
def test_a_requeued_refund_cannot_be_settled_by_hand_while_it_runs(tenant, menu, settings):
    settings.SAGA_MAX_RETRIES = 0
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    with sending_to("memory://"):
        assert capture(payment) == "conflict"
        compensation_id = capture_refund_id(payment.pk)
        assert refund_unwanted_capture(compensation_id=compensation_id) == (
            RefundOutcome.DEAD_LETTERED
        )
        # when staff requeue the letter (its message not yet run)
        letter = DeadLetter.objects.get(key=compensation_id)
        requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:b")
    # then the conflict cannot be resolved by hand meanwhile
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    with pytest.raises(CaptureRefundRunning):
        resolve_conflict(conflict_id=conflict.pk, outcome="refunded", note="n", actor="staff:a")
    # and the refund, run, resolves it: resolving it again is refused
    assert refund_unwanted_capture(compensation_id=compensation_id) == RefundOutcome.REFUNDED
    assert len(refunds()) == 1
    with pytest.raises(ConflictNotOpen):
        resolve_conflict(conflict_id=conflict.pk, outcome="refunded", note="n", actor="staff:a")


def test_a_refund_whose_message_was_lost_is_sent_again_by_the_sweep(
    tenant, menu, settings, django_capture_on_commit_callbacks
):
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    # given a capture whose refund's message was never sent (the process died at the commit)
    with django_capture_on_commit_callbacks(execute=False):
        assert capture(payment) == "conflict"
    # when the sweep runs before the longest retry wait has passed, it leaves it alone
    assert resend_due_capture_refunds() == 0
    # and once it has passed, it sends it: the refund runs (eagerly here), once
    later = timezone.now() + timedelta(seconds=settings.SAGA_RETRY_MAX_SECONDS + 61)
    assert resend_due_capture_refunds(now=later) == 1
    assert len(refunds()) == 1
    assert resend_due_capture_refunds(now=later + timedelta(hours=1)) == 0


def test_refunds_the_broker_did_not_take_stay_due_for_the_next_sweep(
    tenant, menu, monkeypatch, django_capture_on_commit_callbacks
):
    """A resend the broker refused is no send: the refunds stay due and the next sweep sends
    them. The sweep marked each due refund as sent before sending it, and went on through the
    batch after a send failed (each then refused at once while the process's sends paused):
    a broker down for a moment at one sweep put every refund owed back by the longest retry
    wait and a minute (6 minutes by default) for sends never made (red: none sent after)."""
    now = [0.0]
    monkeypatch.setattr(dispatch, "_broker", dispatch.broker_breaker(clock=lambda: now[0]))
    # given two captures after a cancel whose refunds' messages were lost an hour ago
    steps = []
    for _ in range(2):
        order, payment = paying_order(tenant, menu["pizza"])
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
        with django_capture_on_commit_callbacks(execute=False):
            assert capture(payment) == "conflict"
        steps.append(capture_refund_id(payment.pk))
    pending = Compensation.all_tenants.filter(compensation_id__in=steps)
    pending.update(updated_at=timezone.now() - timedelta(hours=1))
    # when the sweep meets a broker that refuses connections (stopped)
    broker = RedisNode().start()
    try:
        broker.stop()
        with sending_to(broker.url):
            assert resend_due_capture_refunds() == 0
    finally:
        broker.remove()
    # then, once the broker answers (here: the tasks run in this process) after the pause of
    # sends, the next sweep sends both, and each is refunded once
    now[0] += dispatch.BROKER_PAUSE_SECONDS
    assert resend_due_capture_refunds() == 2
    assert sorted(key for _, key, _ in refunds()) == sorted(steps)
    assert set(pending.values_list("status", flat=True)) == {Compensation.Status.DONE}


def test_staff_resolving_a_conflict_being_refunded_are_told_and_it_stays_open(
    tenant, menu, django_capture_on_commit_callbacks
):
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with django_capture_on_commit_callbacks(execute=False):
        assert capture(payment) == "conflict"
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x-123456789"))
    answer = staff.post(
        "/admin/ordering/providerconflict/",
        {
            "action": "resolve",
            ACTION_CHECKBOX_NAME: [str(conflict.pk)],
            "apply": "1",
            "outcome": "refunded",
            "note": "done at the provider",
        },
        follow=True,
    )
    assert answer.status_code == 200
    shown = [str(m) for m in answer.context["messages"]]
    assert "0 conflict(s) resolved." in shown
    assert any("1 are being refunded by the platform" in m for m in shown), shown
    conflict.refresh_from_db()
    assert not conflict.resolved
    # and the restaurant's page of the order says the platform is refunding it
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))
    page = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
    assert "money was taken after the order was cancelled" in page
    assert "The platform is refunding it to the diner." in page
    assert "Platform staff will refund or confirm it." not in page


@pytest.mark.django_db(transaction=True)
def test_a_requeued_refund_is_not_sent_again_by_the_sweep_while_its_message_is_fresh(
    tenant, menu, settings
):
    settings.SAGA_MAX_RETRIES = 0
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    compensation_id = capture_refund_id(payment.pk)
    with sending_to("memory://"):
        assert capture(payment) == "conflict"
        assert refund_unwanted_capture(compensation_id=compensation_id) == (
            RefundOutcome.DEAD_LETTERED
        )
        # the failed attempt was long ago; staff requeue it now
        Compensation.all_tenants.filter(compensation_id=compensation_id).update(
            updated_at=timezone.now() - timedelta(hours=1)
        )
        requeue_dead_letter(
            dead_letter_id=DeadLetter.objects.get(key=compensation_id).pk, actor="staff:b"
        )
        # then the sweep leaves the requeued message alone (red: sent a second copy at once)
        assert resend_due_capture_refunds() == 0


def test_a_conflict_recorded_before_the_platform_refunded_such_money_stays_with_staff(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given a capture after a cancel recorded as before migration 0018: no refund step
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with django_capture_on_commit_callbacks(execute=False):
        assert capture(payment) == "conflict"
    Compensation.all_tenants.filter(compensation_id=capture_refund_id(payment.pk)).delete()
    # then the restaurant's page says staff will settle it, and staff may resolve it
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))
    page = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
    assert "Platform staff will refund or confirm it." in page
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    resolve_conflict(conflict_id=conflict.pk, outcome="refunded", note="by hand", actor="staff:a")
    assert not refunds()


def test_money_reported_with_another_amount_first_is_left_to_staff(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given a cancelled order whose payment the provider reported taken with another amount
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    assert capture(payment, amount=Decimal("1.00")) == "conflict"
    # when it reports the same money again with the order's amount
    with django_capture_on_commit_callbacks(execute=True):
        assert capture(payment) == "conflict"
    # then the platform refunds nothing: staff, who see both reports, decide what goes back
    # (red: refunded here, and again by staff for the other report)
    assert not refunds()
    assert (
        not Compensation.objects.for_tenant(tenant)
        .filter(step=Compensation.Step.REFUND_CAPTURE)
        .exists()
    )
    kinds = set(ProviderConflict.objects.for_tenant(tenant).values_list("kind", "resolved"))
    assert kinds == {(Kind.AMOUNT_MISMATCH, False), (Kind.PAID_AFTER_CANCEL, False)}


def test_another_amount_reported_while_the_platform_refunds_waits_for_the_refund(
    tenant, menu, django_capture_on_commit_callbacks
):
    # given money taken after a cancel, its refund not yet run
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    with django_capture_on_commit_callbacks(execute=False):
        assert capture(payment) == "conflict"
    # when the provider reports the same money with another amount
    assert capture(payment, amount=Decimal("1.00")) == "conflict"
    mismatch = ProviderConflict.objects.for_tenant(tenant).get(kind=Kind.AMOUNT_MISMATCH)
    # then staff cannot resolve that report while the platform refunds the money (red:
    # resolved as refunded by hand beside the platform's refund)
    with pytest.raises(CaptureRefundRunning):
        resolve_conflict(conflict_id=mismatch.pk, outcome="refunded", note="n", actor="staff:a")
    # and once the refund is done they can, seeing the payment refunded
    refund_unwanted_capture(compensation_id=capture_refund_id(payment.pk))
    payment.refresh_from_db()
    assert payment.status == P.REFUNDED
    resolve_conflict(
        conflict_id=mismatch.pk, outcome="ignored", note="refunded already", actor="staff:a"
    )
    assert len(refunds()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_refund_whose_sending_fails_after_the_commit_leaves_the_callback_answered(
    tenant, menu, monkeypatch
):
    """The refund's task is sent by a robust on-commit hook: a failure there is logged and
    the callback, committed, is answered what it recorded. Django's robust hook names the
    failing callback by its ``__qualname__``, which a ``functools.partial`` lacks: the failure
    escaped as an AttributeError instead."""

    def send_fails(compensation_id: str) -> int:
        raise RuntimeError("the send failed")

    monkeypatch.setattr(capture_refunds, "_send", send_fails)
    order, payment = paying_order(tenant, menu["pizza"], quantity=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")

    assert capture(payment) == "conflict"
    step = Compensation.objects.for_tenant(tenant).get(
        compensation_id=capture_refund_id(payment.pk)
    )
    assert step.status == Compensation.Status.PENDING  # in the database: the sweep sends it


def three_open_conflicts(tenant: Any, menu: Any, settings: Any) -> tuple[Any, Any, Any]:
    """Three orders with an open conflict each: a capture after a cancel whose refund is still
    to run, one whose refund failed for good (its dead letter open), and another amount
    reported; the orders in that order."""
    settings.SAGA_MAX_RETRIES = 0
    refunding_order, refunding = paying_order(tenant, menu["pizza"])
    failed_order, failed = paying_order(tenant, menu["pizza"])
    mismatch_order, mismatch = paying_order(tenant, menu["pizza"])
    for order in (refunding_order, failed_order):
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    plan_fault(order=failed_order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    with sending_to("memory://"):  # the refunds' messages are sent, and not run
        assert capture(refunding) == capture(failed) == "conflict"
        assert capture(mismatch, amount=Decimal("1.00")) == "conflict"
    assert refund_unwanted_capture(compensation_id=capture_refund_id(failed.pk)) == (
        RefundOutcome.DEAD_LETTERED
    )
    return refunding_order, failed_order, mismatch_order


def staff_client() -> Client:
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", password="x-123456789"))
    return staff


@pytest.mark.django_db(transaction=True)
def test_the_admin_s_conflict_list_says_which_open_conflicts_the_platform_is_refunding(
    tenant, menu, settings
):
    # given two captures after a cancel: one whose refund is still to run, one whose refund
    # failed for good (its dead letter open), and another amount reported for a third order
    refunding_order, failed_order, mismatch_order = three_open_conflicts(tenant, menu, settings)
    staff = staff_client()

    # when staff open the list of open conflicts
    page = staff.get("/admin/ordering/providerconflict/", {"state": "open"})

    # then each row says whether staff have anything to do: the platform's refund running
    # needs nobody, the one that failed for good needs a refund by hand (it read "Open",
    # like the others, and only a Resolve refused with a note already written told them)
    cl = page.context["cl"]
    states = {c.order_id: cl.model_admin.state(c) for c in cl.result_list}
    assert states == {
        refunding_order.pk: "Open: the platform is refunding it",
        failed_order.pk: "Open: the platform's refund failed for good (see its dead letter)",
        mismatch_order.pk: "Open",
    }
    for state in states.values():
        assert f'<td class="field-state">{escape(state)}</td>' in page.content.decode()
    # and so does the conflict's own page
    waiting = ProviderConflict.all_tenants.get(order=failed_order)
    own = staff.get(f"/admin/ordering/providerconflict/{waiting.pk}/change/")
    assert escape(states[failed_order.pk]) in own.content.decode()


@pytest.mark.parametrize("how", ["offboarding", "staff"])
def test_money_taken_for_a_suspended_restaurant_is_refunded_once(
    tenant, menu, tmp_path, how, django_capture_on_commit_callbacks
):
    """A restaurant suspended (by staff, or as its offboarding waits for the payments under
    way) takes no order: its dashboard and keys are closed. A capture of a payment still
    pending made the order PAID there, and the offboarding then deleted it with the diner's
    money. Now the order is cancelled and the capture refunded by the platform, as money
    taken after a cancel is (red before: "applied", the order PAID)."""
    from ordering.privacy.offboarding import run_offboarding, start_offboarding
    from tenants.models import Tenant

    # given a paying order at a restaurant then suspended
    order, payment = paying_order(tenant, menu["pizza"], quantity=2)
    job = None
    if how == "offboarding":
        job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
        job = run_offboarding(job.pk)
        assert "1 payments awaiting the provider" in job.last_error
    else:
        Tenant.objects.filter(pk=tenant.pk).update(status=Tenant.Status.SUSPENDED)
    # when the provider reports the capture
    with django_capture_on_commit_callbacks(execute=True):
        result = capture(payment)
    # then it is a conflict the platform refunds once, the order cancelled, its portions back
    assert result == "conflict"
    assert refunds() == [(payment.provider_txn_id, capture_refund_id(payment.pk), Decimal("19.00"))]
    order.refresh_from_db()
    payment.refresh_from_db()
    assert (order.status, payment.status) == (S.CANCELLED, P.REFUNDED)
    menu["pizza"].refresh_from_db()
    assert menu["pizza"].stock == 50
    conflict = ProviderConflict.all_tenants.get(payment=payment)
    assert (conflict.kind, conflict.resolved) == (Kind.PAID_AFTER_CANCEL, True)
    # and the same capture again moves nothing
    assert capture(payment) == "duplicate"
    assert len(refunds()) == 1
    # and the offboarding, nothing of its money moving any more, finishes
    if job is not None:
        assert run_offboarding(job.pk).is_done


def test_the_admin_lists_the_open_conflicts_waiting_for_staff_as_the_alert_counts_them(
    tenant, menu, settings
):
    # given a capture after a cancel the platform is refunding, one whose refund failed for
    # good, and another amount reported for a third order
    _, failed_order, mismatch_order = three_open_conflicts(tenant, menu, settings)
    staff = staff_client()

    # when staff paged by ProviderConflictsWaitingForStaff filter the list on what it counts
    page = staff.get("/admin/ordering/providerconflict/", {"state": "waiting"})

    # then they see the two waiting for them, not the one the platform is refunding (the
    # filter offered "Open" only, which lists that one too)
    assert page.status_code == 200
    assert {c.order_id for c in page.context["cl"].result_list} == {
        failed_order.pk,
        mismatch_order.pk,
    }
    assert "Open, waiting for staff" in page.content.decode()
