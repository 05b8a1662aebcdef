"""The transactional outbox: events commit with their change, publish after commit, and a
lost publish is found by the sweeper; consumers apply each event once."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from ordering.background import consumers, dispatch
from ordering.background.dead_letters import is_flagged
from ordering.background.outbox import emit_event, expect_retry, publish_event, sweep_outbox
from ordering.background.sales import count_refund, count_sale
from ordering.background.tasks import handle_outbox_event
from ordering.models import (
    DeadLetter,
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    ProcessedEvent,
    SalesDay,
    SimulatedOperation,
)
from ordering.services.lifecycle import cancel_order
from ordering.services.placing import MAX_ORDER_AMOUNT
from tenants.models import Tenant
from tests.payments.helpers import paid_order, paying_order, post_callback, signed
from tests.support.auth import bearer, diner_token
from tests.support.broker import sending_to
from tests.support.database_gone import session_ended_before
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_emit_refuses_to_run_outside_the_transaction_of_a_change(tenant, menu):
    order, _ = paid_order(tenant, menu["pizza"])
    with pytest.raises(RuntimeError, match="inside the transaction"):
        emit_event(order=order, event_type=EventType.ORDER_PAID)


def test_cancel_of_a_paid_order_writes_its_event_in_the_same_transaction(tenant, menu):
    order, _ = paid_order(tenant, menu["pizza"])
    # when the cancel's transaction rolls back after the move, then no event is left either
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
        assert (
            OutboxEvent.objects.for_tenant(tenant)
            .filter(event_type=EventType.CANCEL_REQUESTED)
            .exists()
        )
        1 / 0  # noqa: B018
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID
    assert (
        not OutboxEvent.objects.for_tenant(tenant)
        .filter(event_type=EventType.CANCEL_REQUESTED)
        .exists()
    )


def test_the_event_is_published_only_after_commit(tenant, menu, django_capture_on_commit_callbacks):
    order, _ = paid_order(tenant, menu["pizza"])
    with django_capture_on_commit_callbacks(execute=False) as scheduled:
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
        event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.CANCEL_REQUESTED)
        assert event.published_at is None
    assert len(scheduled) == 1
    assert (event.version, event.payload) == (4, {"actor": "diner", "from_status": "PAID"})


def test_a_failed_publish_leaves_the_row_for_the_sweeper(tenant, menu, monkeypatch):
    paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(published_at=None)

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(dispatch, "enqueue", broker_down)
    assert publish_event(event_id=event.pk) is False
    event.refresh_from_db()
    assert (event.published_at, event.publish_attempts) == (None, 1)
    assert "broker unreachable" in event.last_error


# the statement that marks an event published once the broker took it (publish_event)
MARK_PUBLISHED = 'SET "published_at"'


@pytest.mark.django_db(transaction=True)
def test_a_cancel_whose_session_ends_after_its_commit_is_answered_not_a_500(tenant, menu):
    """The database ends the request's session after the cancel committed, as the publish
    marks its event sent: the diner is answered the cancel that happened (it was a 500, "a bug
    on our side": the publish raised out of Django's on-commit hook), the event is left to
    the sweeper, and the key's retry replays the same answer; the money goes back once."""
    order, _ = paid_order(tenant, menu["pizza"])
    client = APIClient()
    headers = {**bearer(diner_token(tenant, "diner-1")), "Idempotency-Key": "cancel-1"}
    url = f"/api/v1/orders/{order.pk}/cancel/"

    with session_ended_before(MARK_PUBLISHED):
        answer = APIClient(raise_request_exception=False).post(
            url, data={}, format="json", headers=headers
        )

    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == OrderStatus.CANCELLING
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.CANCEL_REQUESTED)
    assert event.published_at is None  # the sweeper sends it again; its consumer absorbs that
    retry = client.post(url, data={}, format="json", headers=headers)
    assert (retry.status_code, retry.content) == (200, answer.content)
    order.refresh_from_db()
    assert order.status == OrderStatus.CANCELLED
    refunds = SimulatedOperation.objects.filter(kind=SimulatedOperation.Kind.REFUND)
    assert refunds.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_publish_whose_session_ends_after_the_send_does_not_raise(tenant, menu):
    """publish_event never raises, also when the database goes after the broker took the
    event: the row stays unpublished, for the sweeper to send again."""
    paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(published_at=None)

    with session_ended_before(MARK_PUBLISHED):
        assert publish_event(event_id=event.pk) is True

    event.refresh_from_db()
    assert event.published_at is None


@pytest.mark.django_db(transaction=True)
def test_a_callback_whose_session_ends_after_its_commit_is_answered_not_a_500(tenant, menu):
    """The same for the provider's callback: it was answered 500 after the order was paid."""
    order, payment = paying_order(tenant, menu["pizza"])

    with session_ended_before(MARK_PUBLISHED):
        answer = post_callback(
            APIClient(raise_request_exception=False), *signed(payment, event_id="evt_1")
        )

    assert answer.status_code == 200, answer.content
    assert (answer.json()["result"], answer.json()["order_status"]) == ("applied", "PAID")
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID
    assert SalesDay.objects.for_tenant(tenant).get().paid_orders == 1


def test_the_sweeper_publishes_rows_left_unpublished_after_the_grace_period(tenant, menu):
    # given a paid order whose event committed but whose publish was lost (a crash)
    paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    assert event.published_at is None
    # when the sweeper runs inside the grace period, then it leaves the row alone
    assert sweep_outbox(grace_seconds=60) == 0
    # when the row is older than the grace period, then it is published and consumed
    OutboxEvent.all_tenants.filter(pk=event.pk).update(
        created_at=timezone.now() - timedelta(seconds=61)
    )
    assert sweep_outbox(grace_seconds=60) == 1
    event.refresh_from_db()
    assert event.published_at is not None
    assert SalesDay.objects.for_tenant(tenant).get().paid_orders == 1
    # and a published row is never swept again
    assert sweep_outbox(grace_seconds=0) == 0


def test_the_order_paid_consumer_counts_a_sale_once_however_often_delivered(tenant, menu):
    order, _ = paid_order(tenant, menu["pizza"], quantity=3)
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    # when it is delivered three times (its after-commit publish never ran: the test's
    # transaction does not commit)
    assert consumers.handle_event(event_id=event.pk) == consumers.ConsumeResult.PROCESSED
    assert consumers.handle_event(event_id=event.pk) == consumers.ConsumeResult.DUPLICATE
    assert consumers.handle_event(event_id=event.pk) == consumers.ConsumeResult.DUPLICATE
    day = SalesDay.objects.for_tenant(tenant).get()
    assert (day.paid_orders, day.revenue) == (1, order.total)
    processed = ProcessedEvent.objects.for_tenant(tenant).get()
    assert (processed.event_type, processed.version, processed.duplicates) == (
        EventType.ORDER_PAID,
        event.version,
        2,
    )


@pytest.mark.django_db(transaction=True)
def test_an_event_whose_consumed_mark_the_outage_lost_is_retried_and_marked(
    tenant, menu, monkeypatch
):
    """The database ends the worker's session right after the consumer's work committed, as
    the event is marked consumed: the task ended "raised unexpected", not retried, so the
    event stayed unconsumed until the sweeper's resend 10 minutes on. Now the outage is
    retried as any other (ADR 0007): the retry finds the work done and marks the event."""
    monkeypatch.setattr(dispatch, "enqueue", _broker_down)  # the task runs here, not at commit
    paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)

    with session_ended_before('SET "consumed_at"'):
        run = handle_outbox_event.apply(args=[event.pk])

    assert run.successful(), run.result
    assert run.result == consumers.ConsumeResult.DUPLICATE  # the retry's: the sale was counted
    event.refresh_from_db()
    assert event.consumed_at is not None
    assert SalesDay.objects.for_tenant(tenant).get().paid_orders == 1


def _broker_down(*args: object, **kwargs: object) -> None:
    raise dispatch.BrokerUnavailable("down")


def test_a_message_for_an_unknown_event_is_dropped():
    assert consumers.handle_event(event_id=987654321) == consumers.ConsumeResult.MISSING


def test_an_event_counts_its_order_s_transitions_in_its_own_insert(tenant, menu):
    # given a paid order, beside another order of the same restaurant
    paid_order(tenant, menu["pizza"])
    order, _ = paid_order(tenant, menu["pizza"])
    # when it is cancelled, which announces the refund saga's event
    with CaptureQueriesContext(connection) as cancel:
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    # then the event is one statement that counts the order's transitions as it inserts, with
    # no count of its own before it
    table = OutboxEvent._meta.db_table
    [insert] = [q["sql"] for q in cancel.captured_queries if f'INSERT INTO "{table}"' in q["sql"]]
    assert insert.startswith("WITH lead AS (SELECT COUNT(*)"), insert
    assert not [q for q in cancel.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    # and its version is this order's number of transitions (CREATED, PAYING, PAID, CANCELLING)
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.CANCEL_REQUESTED)
    assert event.version == OrderTransition.objects.for_tenant(tenant).filter(order=order).count()
    assert event.version == 4


def sent_and_lost(event: OutboxEvent, *, minutes_ago: float, attempts: int = 1) -> None:
    """The event as the broker leaves it when it accepted the message, then lost it (Redis
    restarted without its data): published ``attempts`` times, the last ``minutes_ago``, due
    again when that send set it (10 minutes later, doubled for each send before it), never
    consumed."""
    when = timezone.now() - timedelta(minutes=minutes_ago)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(
        created_at=when,
        published_at=when,
        last_publish_at=when,
        publish_attempts=attempts,
        resend_at=OutboxEvent.resend_after(sends=attempts, waiting_from=when),
    )


def cancelled_paid_order(tenant, menu) -> OutboxEvent:
    order, _ = paid_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    return OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.CANCEL_REQUESTED)


def due_in(event: OutboxEvent) -> timedelta:
    """How long until the sweeper sends the event again, if no consumer finishes with it."""
    return OutboxEvent.all_tenants.get(pk=event.pk).resend_at - timezone.now()


def roughly(wait: timedelta, minutes: float) -> bool:
    return abs(wait - timedelta(minutes=minutes)) < timedelta(minutes=1)


def test_an_event_the_broker_lost_is_sent_again_and_refunded_once(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    # sent 5 minutes ago and not consumed: the broker may still hold it
    sent_and_lost(event, minutes_ago=5)
    assert sweep_outbox() == 0
    # 11 minutes ago: sent again; the consumer refunds the order and marks the event consumed
    sent_and_lost(event, minutes_ago=11)
    assert sweep_outbox() == 1
    event.refresh_from_db()
    assert event.consumed_at is not None and event.publish_attempts == 2
    assert Order.all_tenants.get(pk=event.order_id).status == OrderStatus.CANCELLED
    assert SimulatedOperation.objects.filter(kind="refund").count() == 1
    # consumed, it is never sent again
    OutboxEvent.all_tenants.filter(pk=event.pk).update(resend_at=timezone.now() - timedelta(days=2))
    assert sweep_outbox() == 0


def test_a_published_event_is_due_again_after_the_redelivery_wait(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    assert publish_event(event_id=event.pk)
    assert roughly(due_in(event), minutes=10)
    # with redelivery off, a send sets no time to send again
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 0
    OutboxEvent.all_tenants.filter(pk=event.pk).update(published_at=None, resend_at=None)
    assert publish_event(event_id=event.pk)
    assert OutboxEvent.all_tenants.get(pk=event.pk).resend_at is None


def test_each_send_again_waits_twice_as_long_as_the_one_before(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    # sent three times already, the last 39 minutes ago: the next send waits 4 x 10 minutes
    sent_and_lost(event, minutes_ago=39, attempts=3)
    assert sweep_outbox() == 0
    sent_and_lost(event, minutes_ago=41, attempts=3)
    lost = []  # the broker takes the message and loses it: no consumer runs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dispatch, "enqueue", lambda *args: lost.append(args))
        assert sweep_outbox() == 1
    assert lost == [(dispatch.HANDLE_OUTBOX_EVENT, event.pk)]
    # the fourth send waits 8 x 10 minutes for the fifth
    assert OutboxEvent.all_tenants.get(pk=event.pk).publish_attempts == 4
    assert roughly(due_in(event), minutes=80)


def test_a_send_again_the_broker_refused_is_not_counted_and_stays_due(
    tenant, menu, settings, monkeypatch
):
    """A send again that the broker does not take is no send: the event stays due, its wait
    not doubled, and the next sweep once the broker answers sends it. The sweep claimed the
    row (its next send twice as far off, one more send counted) before sending, and a refused
    send left it so: a cancel whose message Redis lost, met by a sweep while the broker was
    down, waited 20 minutes more (80 after three such sweeps, at most a day) for a send never
    made (red: due in 20 minutes, 2 sends counted)."""
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    now = [0.0]
    monkeypatch.setattr(dispatch, "_broker", dispatch.broker_breaker(clock=lambda: now[0]))
    event = cancelled_paid_order(tenant, menu)
    # given an event sent 11 minutes ago whose message the broker lost: due again
    sent_and_lost(event, minutes_ago=11)
    # when a sweep sends it again to a broker that refuses connections (stopped)
    broker = RedisNode().start()
    try:
        broker.stop()
        with sending_to(broker.url):
            assert sweep_outbox() == 0
    finally:
        broker.remove()
    # then the send is not counted and the event is still due, the broker's error recorded
    row = OutboxEvent.all_tenants.get(pk=event.pk)
    assert row.publish_attempts == 1 and row.consumed_at is None
    assert row.resend_at <= database_now()
    assert row.last_error
    # and once the broker answers (here: the tasks run in this process) after the pause of
    # sends, the next sweep sends it: the order is cancelled, refunded once
    now[0] += dispatch.BROKER_PAUSE_SECONDS
    assert sweep_outbox() == 1
    row.refresh_from_db()
    assert row.consumed_at is not None and row.publish_attempts == 2
    assert Order.all_tenants.get(pk=event.order_id).status == OrderStatus.CANCELLED
    assert SimulatedOperation.objects.filter(kind="refund").count() == 1


def test_the_wait_between_sends_stops_growing_at_a_day(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    sent_and_lost(event, minutes_ago=0, attempts=12)  # 600 s x 2^11 would be 14 days
    assert roughly(due_in(event), minutes=24 * 60)


def test_a_retry_the_consumer_asked_for_is_waited_for(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    sent_and_lost(event, minutes_ago=11)
    # the consumer failed and asked the broker for a retry in an hour: the sweeper waits for
    # it, then the redelivery wait after it
    expect_retry(event_id=event.pk, countdown=3600)
    assert sweep_outbox() == 0
    assert roughly(due_in(event), minutes=70)
    sent_and_lost(event, minutes_ago=11)
    assert sweep_outbox() == 1


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


@pytest.mark.parametrize("send", ["publish", "sweep", "retry"])
def test_the_next_send_is_due_on_the_database_s_clock(tenant, menu, settings, monkeypatch, send):
    """The sweep reads ``resend_at <= now()`` on the database's clock, so a send sets it on
    that clock too: a web server or worker whose clock was 20 minutes behind the database's
    set it 10 minutes in the database's past, and the next sweep sent again at once an event
    merely waiting in the queue (red: due 10 minutes ago)."""
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    sent_and_lost(event, minutes_ago=11)
    # given a process whose clock is 20 minutes behind the database's
    server_clock = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: server_clock() - timedelta(minutes=20))
    lost = []  # the broker takes the message and loses it: no consumer runs
    monkeypatch.setattr(dispatch, "enqueue", lambda *args: lost.append(args))
    # when it sends the event (again), or hears its consumer ask for a retry in a minute
    if send == "publish":
        OutboxEvent.all_tenants.filter(pk=event.pk).update(published_at=None)
        assert publish_event(event_id=event.pk)
    elif send == "sweep":
        assert sweep_outbox() == 1
    else:
        expect_retry(event_id=event.pk, countdown=60)
    # then the next send is due the redelivery wait from now on the database's clock
    resend_at = OutboxEvent.all_tenants.get(pk=event.pk).resend_at
    wait = resend_at - database_now()
    assert timedelta(minutes=9) < wait <= timedelta(minutes=20 if send == "sweep" else 11)
    assert sweep_outbox() == 0


def test_events_in_a_long_backoff_do_not_hold_back_one_that_is_due(tenant, menu, settings):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    event = cancelled_paid_order(tenant, menu)
    # more events than one sweep reads, sent long ago and many times: their next send is hours
    # off (sent 12 hours ago, 8 times: due in about 9 hours)
    for version in range(100, 106):
        waiting = OutboxEvent.all_tenants.create(
            tenant=tenant,
            order_id=event.order_id,
            event_type=EventType.ORDER_PAID,
            version=version,
        )
        sent_and_lost(waiting, minutes_ago=12 * 60, attempts=8)
    # and one sent once, 11 minutes ago: due now
    sent_and_lost(event, minutes_ago=11)
    # then a sweep reading 5 rows sends the one that is due
    assert sweep_outbox(limit=5) == 1
    assert OutboxEvent.all_tenants.get(pk=event.pk).consumed_at is not None


def test_every_end_of_a_consumer_marks_its_event_consumed(tenant, menu):
    # a processed event, then its duplicate
    paid_order(tenant, menu["pizza"])
    paid = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    for _ in range(2):
        OutboxEvent.all_tenants.filter(pk=paid.pk).update(consumed_at=None)
        handle_outbox_event.apply(args=[paid.pk])
        assert OutboxEvent.all_tenants.get(pk=paid.pk).consumed_at is not None


def test_a_sale_is_booked_on_the_restaurant_s_day_not_the_server_s(tenant, menu):
    # given a restaurant in Shanghai (UTC+8) and an order paid at 17:30 UTC, 01:30 there
    Tenant.objects.filter(pk=tenant.pk).update(time_zone="Asia/Shanghai")
    paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(
        created_at=datetime(2026, 12, 6, 17, 30, tzinfo=UTC)
    )
    # when its sale is counted
    assert consumers.handle_event(event_id=event.pk) == consumers.ConsumeResult.PROCESSED
    # then it is the 7th's sale there, not the 6th's (red: the server's UTC date)
    assert list(SalesDay.objects.for_tenant(tenant).values_list("day", "paid_orders")) == [
        (date(2026, 12, 7), 1)
    ]


def test_a_day_of_orders_at_the_largest_amount_is_summed_without_overflow(tenant):
    # given a day of 150 sales and refunds, each of an order's largest amount (14 digits
    # overflowed at the hundredth: each later sale of the day failed its consumer)
    at = timezone.now()
    for _ in range(150):
        count_sale(tenant=tenant, at=at, currency="EUR", amount=MAX_ORDER_AMOUNT)
        count_refund(tenant=tenant, at=at, currency="EUR", amount=MAX_ORDER_AMOUNT)
    # then the day holds every one of them, to the cent
    day = SalesDay.objects.for_tenant(tenant).get()
    assert (day.paid_orders, day.revenue) == (150, MAX_ORDER_AMOUNT * 150)
    assert (day.refunded_orders, day.refunds) == (150, MAX_ORDER_AMOUNT * 150)


def test_an_event_no_consumer_can_handle_is_dead_lettered_naming_its_order(tenant, menu, settings):
    # given an order.paid event of a type this version has no consumer for (written by a
    # newer release during a rolling deploy), whose handling fails on every attempt
    settings.SAGA_MAX_RETRIES = 0
    order, _ = paid_order(tenant, menu["pizza"])
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.ORDER_PAID)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(event_type="order.refunded_partly")
    # when the task gives up on it
    assert handle_outbox_event.apply(args=[event.pk]).get() == "dead_lettered"
    # then staff find a letter that names the order and its restaurant (red: neither)
    letter = DeadLetter.objects.get()
    assert (letter.key, letter.order_id, letter.tenant_id) == (
        f"task:ordering.handle_outbox_event:{event.pk}",
        order.pk,
        tenant.pk,
    )
    assert is_flagged(order)
