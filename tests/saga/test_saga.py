"""The cancel saga in-process: every step once, retries with backoff, dead letter, requeue."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import DatabaseError, connection
from django.test import Client
from django.utils import timezone

from config.database_unavailable import is_database_unavailable
from ordering.background import consumers, dispatch, saga
from ordering.background.dead_letters import (
    DeadLetterNotOpen,
    discard_dead_letter,
    is_flagged,
    requeue_dead_letter,
)
from ordering.background.outbox import sweep_outbox
from ordering.background.saga import STEPS, SagaOutcome, run_cancel_saga
from ordering.background.steps import RetryLater, backoff_seconds
from ordering.models import (
    Compensation,
    DeadLetter,
    EventType,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    ProcessedEvent,
    SalesDay,
    SimulatedOperation,
)
from ordering.payments.base import ProviderError
from ordering.payments.registry import get_provider
from ordering.services.lifecycle import cancel_order
from ordering.simulation import plan_fault
from tenants.models import Tenant
from tests.dashboard.factories import make_merchant
from tests.payments.helpers import paid_order
from tests.support.concurrency import at_once
from tests.support.database_gone import session_ended_before

S = OrderStatus
Step = Compensation.Step


def cancelled(tenant, menu, **kwargs):
    """A paid order (2 pizzas, coupon TEN) whose cancel was requested: CANCELLING + event."""
    order, payment = paid_order(tenant, menu["pizza"], quantity=2, coupon_code="TEN", **kwargs)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order=order, event_type=EventType.CANCEL_REQUESTED
    )
    return order, payment, event


def effects(tenant, menu, coupon, order, payment) -> dict:
    for obj in (menu["pizza"], coupon, order, payment):
        obj.refresh_from_db()
    return {
        "status": order.status,
        "stock": menu["pizza"].stock,
        "coupon_used": coupon.used_count,
        "payment": payment.status,
        "refunds": SimulatedOperation.objects.filter(kind="refund").count(),
        "delivery_cancels": SimulatedOperation.objects.filter(kind="delivery_cancel").count(),
    }


DONE = {
    "status": S.CANCELLED,
    "stock": 50,
    "coupon_used": 0,
    "payment": Payment.Status.REFUNDED,
    "refunds": 1,
    "delivery_cancels": 1,
}


@pytest.mark.django_db
def test_the_saga_undoes_everything_once_and_cancels(tenant, menu, coupon):
    order, payment, event = cancelled(tenant, menu)
    assert effects(tenant, menu, coupon, order, payment)["stock"] == 48
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert effects(tenant, menu, coupon, order, payment) == DONE
    comps = Compensation.objects.for_tenant(tenant).filter(order=order)
    assert [(c.compensation_id, c.status, c.attempts) for c in comps] == [
        (f"cancel:{order.pk}:{step}", "done", 1) for step in STEPS
    ]
    refund = comps.get(step=Step.REFUND_PAYMENT).result
    assert (refund["amount"], refund["replayed"]) == (str(payment.amount), False)
    last = OrderTransition.objects.for_tenant(tenant).filter(order=order).latest("id")
    assert (last.from_status, last.to_status, last.actor) == (
        S.CANCELLING,
        S.CANCELLED,
        "saga:cancel",
    )
    assert ProcessedEvent.objects.for_tenant(tenant).filter(event=event).count() == 1


@pytest.mark.django_db
def test_running_it_again_changes_nothing(tenant, menu, coupon):
    order, payment, event = cancelled(tenant, menu)
    run_cancel_saga(event=event)
    assert run_cancel_saga(event=event) == SagaOutcome.ALREADY_DONE
    assert consumers.handle_event(event_id=event.pk) == consumers.ConsumeResult.DUPLICATE
    assert effects(tenant, menu, coupon, order, payment) == DONE
    assert ProcessedEvent.objects.for_tenant(tenant).get(event=event).duplicates == 2


def refunds_booked(tenant) -> list[tuple[int, object, str]]:
    return [
        (day.refunded_orders, day.refunds, day.currency)
        for day in SalesDay.objects.for_tenant(tenant).filter(refunded_orders__gt=0)
    ]


@pytest.mark.django_db
def test_the_refund_is_booked_in_the_daily_sales_once(tenant, menu, coupon):
    # given a paid order whose cancel was requested
    _, payment, event = cancelled(tenant, menu)
    # when the saga runs, and runs again (a redelivery)
    run_cancel_saga(event=event)
    run_cancel_saga(event=event)
    # then the day's sales show the money given back, once
    assert refunds_booked(tenant) == [(1, payment.amount, payment.currency)]


@pytest.mark.django_db
def test_a_refund_is_booked_on_the_restaurant_s_day(tenant, menu, coupon):
    # given a restaurant whose date differs from the server's UTC date right now
    now = timezone.now()
    zone = "Etc/GMT+12" if now.hour < 10 else "Pacific/Kiritimati"  # UTC-12, UTC+14
    Tenant.objects.filter(pk=tenant.pk).update(time_zone=zone)
    _, _, event = cancelled(tenant, menu)
    # when the saga refunds the order
    run_cancel_saga(event=event)
    # then the refund is booked on the restaurant's date (red: the server's)
    refunded = SalesDay.objects.for_tenant(tenant).filter(refunded_orders=1).get()
    assert refunded.day == now.astimezone(ZoneInfo(zone)).date() != now.date()


@pytest.mark.django_db
def test_a_payment_never_captured_is_voided_and_books_no_refund(tenant, menu, coupon):
    # given an order in CANCELLING whose payment is still pending when the saga runs
    _, payment, event = cancelled(tenant, menu)
    Payment.all_tenants.filter(pk=payment.pk).update(status=Payment.Status.PENDING)
    # when the saga voids it, then no refund is booked
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert refunds_booked(tenant) == []


@pytest.mark.django_db
def test_a_refund_done_by_a_worker_that_died_before_recording_it_is_not_repeated(
    tenant, menu, coupon
):
    # given a worker that got the provider's refund and died before it recorded the step
    order, payment, event = cancelled(tenant, menu)
    get_provider("simulated").refund(
        payment=payment,
        amount=payment.amount,
        idempotency_key=f"cancel:{order.pk}:{Step.REFUND_PAYMENT}",
    )
    # when the redelivered message runs the saga
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    # then the provider was asked twice and refunded once
    assert effects(tenant, menu, coupon, order, payment) == DONE
    assert SimulatedOperation.objects.get(kind="refund").calls == 2
    assert Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_PAYMENT).result["replayed"]


@pytest.mark.django_db
@pytest.mark.parametrize("reused_for", ["another-amount", "another-payment"])
def test_the_provider_refuses_a_refund_key_reused_for_another_refund(tenant, menu, reused_for):
    """The simulated provider answers a key it saw with that key's refund (a retry), and
    refuses the key sent with other terms, as a careful provider does (Stripe answers 400
    ``idempotency_error``): the refund asked for was not made, so the caller must not record
    it as made. Red before: the first refund came back as ``replayed``, whatever amount or
    payment the second call named, and a step reusing a key would record money returned that
    never moved."""
    # given a refund made under a step's key
    order, payment = paid_order(tenant, menu["pizza"])
    _, other_payment = paid_order(tenant, menu["pasta"])
    provider = get_provider("simulated")
    key = f"cancel:{order.pk}:{Step.REFUND_PAYMENT}"
    first = provider.refund(payment=payment, amount=payment.amount, idempotency_key=key)
    # when the key comes again with another amount, or for another payment
    with pytest.raises(ProviderError, match="another operation"):
        if reused_for == "another-amount":
            provider.refund(payment=payment, amount=Decimal("0.01"), idempotency_key=key)
        else:
            provider.refund(payment=other_payment, amount=other_payment.amount, idempotency_key=key)
    # then no refund is made for it, and the same terms still replay the first refund
    assert SimulatedOperation.objects.filter(kind="refund").count() == 1
    again = provider.refund(payment=payment, amount=payment.amount, idempotency_key=key)
    assert (again.refund_id, again.amount, again.replayed) == (first.refund_id, first.amount, True)


@pytest.mark.django_db
def test_a_failing_step_asks_for_a_retry_and_keeps_earlier_steps_done(
    tenant, menu, coupon, settings
):
    settings.SAGA_RETRY_BASE_SECONDS = 2.0
    order, payment, event = cancelled(tenant, menu)
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=2)
    for attempt in (1, 2):
        with pytest.raises(RetryLater) as retry:
            run_cancel_saga(event=event)
        assert (retry.value.step, retry.value.attempt) == (Step.REFUND_PAYMENT, attempt)
        ceiling = 2.0 * 2 ** (attempt - 1)
        assert ceiling / 2 <= retry.value.countdown <= ceiling
    state = effects(tenant, menu, coupon, order, payment)
    assert (state["status"], state["stock"], state["refunds"]) == (S.CANCELLING, 50, 0)
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert effects(tenant, menu, coupon, order, payment) == DONE
    refund = Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_PAYMENT)
    assert (refund.attempts, refund.last_error) == (3, "")


@pytest.mark.django_db(transaction=True)
def test_a_step_the_database_outage_failed_spends_no_retry_and_files_no_letter(
    tenant, menu, coupon, settings, monkeypatch
):
    """The database ends the worker's session as the courier's cancel is asked (a restart, a
    failover): that is no failure of the step. It was counted as one, and past the retry
    limit dead-lettered for staff, the order left CANCELLING; now the outage is raised for
    the task, which retries it for as long as the outage lasts (ADR 0007), and the attempt is
    given back."""
    settings.SAGA_MAX_RETRIES = 0  # any failure of the step's own is its last

    def broker_down(*args, **kwargs):
        raise dispatch.BrokerUnavailable("down")

    monkeypatch.setattr(dispatch, "enqueue", broker_down)  # the saga runs here, not at commit
    order, payment, event = cancelled(tenant, menu)

    with (
        pytest.raises(DatabaseError) as outage,
        session_ended_before('"ordering_simulatedoperation"'),
    ):
        run_cancel_saga(event=event)

    assert is_database_unavailable(outage.value)
    assert not DeadLetter.objects.exists()
    step = Compensation.objects.for_tenant(tenant).get(step=Step.CANCEL_DELIVERY)
    assert (step.status, step.attempts) == (Compensation.Status.PENDING, 0)
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    assert effects(tenant, menu, coupon, order, payment) == DONE
    step.refresh_from_db()
    assert (step.status, step.attempts) == (Compensation.Status.DONE, 1)


def fail_past_the_limit(order, event, *, step: str) -> None:
    """``step`` fails 4 times (1 attempt + 3 retries): the saga ends in a dead letter."""
    plan_fault(order=order, step=step, fail_times=4)
    for _ in range(3):
        with pytest.raises(RetryLater):
            run_cancel_saga(event=event)
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED


@pytest.mark.django_db
def test_a_requeue_the_broker_does_not_take_is_sent_again_by_the_sweeper(
    tenant, menu, coupon, monkeypatch, settings, django_capture_on_commit_callbacks
):
    # given a saga dead-lettered after its refund failed past the limit (its event consumed)
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    order, payment, event = cancelled(tenant, menu)
    fail_past_the_limit(order, event, step=Step.REFUND_PAYMENT)
    # (its message published and consumed, as the worker leaves it)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(
        published_at=timezone.now(), consumed_at=timezone.now()
    )
    letter = DeadLetter.objects.get()

    # when staff requeue it while the broker is down: the requeue commits, the send fails
    def broker_down(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(dispatch, "enqueue", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:ann")
    monkeypatch.undo()
    # then its event is among those sent and not consumed, and once the wait has passed the
    # sweeper sends it again: the order is refunded, once (it stayed CANCELLING for good)
    event.refresh_from_db()
    assert event.consumed_at is None
    assert timedelta(minutes=9) < event.resend_at - timezone.now() <= timedelta(minutes=10)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(
        resend_at=timezone.now() - timedelta(minutes=1)
    )
    assert sweep_outbox() == 1
    assert effects(tenant, menu, coupon, order, payment) == DONE


@pytest.mark.django_db
def test_past_the_retry_limit_it_dead_letters_and_a_requeue_completes_it(tenant, menu, coupon):
    # given a delivery cancellation that fails 4 times (1 attempt + 3 retries)
    order, payment, event = cancelled(tenant, menu)
    # when the last retry fails, then a dead letter is written and the order stays CANCELLING
    fail_past_the_limit(order, event, step=Step.CANCEL_DELIVERY)
    letter = DeadLetter.objects.get()
    assert (letter.key, letter.task, letter.attempts, letter.state) == (
        f"cancel:{order.pk}:{Step.CANCEL_DELIVERY}",
        "ordering.handle_outbox_event",
        4,
        "open",
    )
    assert letter.payload == {
        "args": [event.pk],
        "step": "cancel_delivery",
        "order_id": str(order.pk),
    }
    assert "simulated failure of cancel_delivery" in letter.error
    assert letter.created_at is not None and (letter.tenant, letter.order) == (tenant, order)
    assert effects(tenant, menu, coupon, order, payment)["status"] == S.CANCELLING
    assert is_flagged(order)
    # and a late duplicate of the message neither retries nor files a second letter
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED
    assert DeadLetter.objects.count() == 1
    # when staff requeue it (tasks run eagerly here: the requeued message runs at commit)
    requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:ann")
    # then the saga completes from the failed step, and the letter is closed
    assert run_cancel_saga(event=event) in (SagaOutcome.COMPLETED, SagaOutcome.ALREADY_DONE)
    assert effects(tenant, menu, coupon, order, payment) == DONE
    letter.refresh_from_db()
    assert (letter.state, letter.resolved_by) == ("requeued", "staff:ann")
    assert not is_flagged(order)
    with pytest.raises(DeadLetterNotOpen):
        requeue_dead_letter(dead_letter_id=letter.pk, actor="staff:bob")


@pytest.mark.django_db
def test_the_retry_limit_is_a_setting(tenant, menu, coupon, settings):
    settings.SAGA_MAX_RETRIES = 1
    order, _, event = cancelled(tenant, menu)
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=5)
    with pytest.raises(RetryLater):
        run_cancel_saga(event=event)
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED
    assert DeadLetter.objects.get().attempts == 2


@pytest.mark.django_db
def test_discarding_closes_the_letter_and_leaves_the_order(tenant, menu, coupon, settings):
    settings.SAGA_MAX_RETRIES = 0
    order, _, event = cancelled(tenant, menu)
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=1)
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED
    letter = discard_dead_letter(
        dead_letter_id=DeadLetter.objects.get().pk, actor="staff:ann", note="refunded by hand"
    )
    assert (letter.state, letter.note) == ("discarded", "refunded by hand")
    order.refresh_from_db()
    assert order.status == S.CANCELLING and not is_flagged(order)
    with pytest.raises(DeadLetterNotOpen):
        discard_dead_letter(dead_letter_id=letter.pk, actor="staff:bob", note="refunded again")


@pytest.mark.django_db
def test_the_restaurant_s_page_of_a_cancel_stopped_for_staff_says_so_not_refund_in_progress(
    tenant, menu, coupon, settings
):
    settings.SAGA_MAX_RETRIES = 0
    order, _, event = cancelled(tenant, menu)
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))

    def next_step() -> str:
        page = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
        return re.search(r'<p class="muted">(Nothing for the restaurant to do now[^<]*)</p>', page)[
            1
        ]

    # while the saga runs, the refund is in progress
    assert next_step() == "Nothing for the restaurant to do now (refund in progress)."
    # when the refund fails past its retries (its dead letter open)
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=1)
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED
    # then the page says it stopped and waits for staff (it said "refund in progress")
    assert next_step() == (
        "Nothing for the restaurant to do now (the refund to the diner failed: "
        "platform staff will see to it)."
    )
    # and once staff settled it by hand and discarded the letter, it says that, for good
    discard_dead_letter(
        dead_letter_id=DeadLetter.objects.get().pk, actor="staff:ann", note="refunded by hand"
    )
    assert next_step() == (
        "Nothing for the restaurant to do now (the refund to the diner failed: "
        "platform staff settled it by hand)."
    )


def test_backoff_grows_exponentially_with_jitter_and_a_cap(settings):
    settings.SAGA_RETRY_BASE_SECONDS = 2.0
    settings.SAGA_RETRY_MAX_SECONDS = 10.0
    for attempt, ceiling in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (9, 10.0)]:
        delays = [backoff_seconds(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered


@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_apply_each_step_once(tenant, menu, coupon, monkeypatch):
    with monkeypatch.context() as sent:  # the saga's message is sent, not yet run
        sent.setattr(dispatch, "enqueue", lambda *args, **kwargs: None)
        order, payment, event = cancelled(tenant, menu)
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def run() -> None:
        try:
            barrier.wait()
            outcomes.append(run_cancel_saga(event=OutboxEvent.all_tenants.get(pk=event.pk)))
        except Exception as exc:
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert SagaOutcome.COMPLETED in outcomes, outcomes
    assert all(isinstance(o, SagaOutcome) for o in outcomes), outcomes
    assert effects(tenant, menu, coupon, order, payment) == DONE
    assert OrderTransition.objects.for_tenant(tenant).filter(to_status=S.CANCELLED).count() == 1
    assert Compensation.objects.for_tenant(tenant).count() == len(STEPS)
    assert refunds_booked(tenant) == [(1, payment.amount, payment.currency)]


@pytest.mark.django_db(transaction=True)
def test_a_refund_that_went_through_beside_a_run_giving_up_is_recorded(
    tenant, menu, coupon, settings, monkeypatch
):
    settings.SAGA_MAX_RETRIES = 0
    with monkeypatch.context() as sent:  # the saga's message is sent, not yet run
        sent.setattr(dispatch, "enqueue", lambda *args, **kwargs: None)
        order, payment, event = cancelled(tenant, menu)
    # given a provider that fails one refund call and answers the next slowly, the money moved
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=1, delay_times=1, delay_seconds=1)
    # when two runs meet, one failing the refund's last attempt while the provider refunds
    # the other's
    outcomes = at_once(
        lambda: run_cancel_saga(event=OutboxEvent.all_tenants.get(pk=event.pk)),
        lambda: run_cancel_saga(event=OutboxEvent.all_tenants.get(pk=event.pk)),
    )
    # then the order is cancelled with its refund recorded and booked once: not cancelled
    # with its payment taken, the step failed and its letter open (a requeue of which finds
    # the saga done and records nothing)
    assert sorted(outcomes) == sorted([SagaOutcome.COMPLETED, SagaOutcome.DEAD_LETTERED])
    assert effects(tenant, menu, coupon, order, payment) == DONE
    assert SimulatedOperation.objects.filter(kind="refund").count() == 1
    assert refunds_booked(tenant) == [(1, payment.amount, payment.currency)]
    assert not is_flagged(order)


@pytest.mark.django_db(transaction=True)
def test_a_run_finding_a_step_failed_by_another_meanwhile_does_not_cancel_the_order(
    tenant, menu, coupon, settings, monkeypatch
):
    settings.SAGA_MAX_RETRIES = 0
    with monkeypatch.context() as sent:  # the saga's message is sent, not yet run
        sent.setattr(dispatch, "enqueue", lambda *args, **kwargs: None)
        order, payment, event = cancelled(tenant, menu)
    failed = threading.Event()
    real_return_stock, real_begin_attempt = saga.return_stock, saga.begin_attempt

    def return_stock(order):
        if threading.current_thread().name == "failing":
            raise ConnectionError("database connection lost")
        return real_return_stock(order)

    def begin_attempt(compensation):
        if threading.current_thread().name == "late":
            failed.wait(10)  # it read the step pending; the other run fails it for good now
        return real_begin_attempt(compensation)

    monkeypatch.setattr(saga, "return_stock", return_stock)
    monkeypatch.setattr(saga, "begin_attempt", begin_attempt)
    outcomes: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            outcomes[name] = run_cancel_saga(event=OutboxEvent.all_tenants.get(pk=event.pk))
        except Exception as exc:
            outcomes[name] = exc
        finally:
            if name == "failing":
                failed.set()
            connection.close()

    # when one run fails restoring the stock for good while another, which read the step
    # pending, runs it
    threads = [
        threading.Thread(target=run, args=(name,), name=name) for name in ("late", "failing")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # then the order stays CANCELLING with the step's letter for staff, not CANCELLED with its
    # portions never returned (a requeue then finding the saga done)
    assert outcomes == {"failing": SagaOutcome.DEAD_LETTERED, "late": SagaOutcome.DEAD_LETTERED}
    order.refresh_from_db()
    assert order.status == S.CANCELLING
    assert is_flagged(order)
    # and the requeue completes it
    monkeypatch.undo()
    requeue_dead_letter(dead_letter_id=DeadLetter.objects.get().pk, actor="staff:ann")
    assert effects(tenant, menu, coupon, order, payment) == DONE


@pytest.mark.django_db(transaction=True)
def test_in_eager_mode_cancel_runs_the_saga_after_commit_with_retries(tenant, menu, coupon):
    # the embedded demo: no broker, tasks run in-process after the commit that scheduled them
    order, payment = paid_order(tenant, menu["pizza"], quantity=2, coupon_code="TEN")
    plan_fault(order=order, step=Step.REFUND_PAYMENT, fail_times=2)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    assert effects(tenant, menu, coupon, order, payment) == DONE
    assert Compensation.objects.for_tenant(tenant).get(step=Step.REFUND_PAYMENT).attempts == 3
