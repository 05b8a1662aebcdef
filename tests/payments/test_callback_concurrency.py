"""20 identical callbacks at once (the provider retrying over a slow network): one applies."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection
from rest_framework.test import APIClient

from idempotency.models import DuplicateAudit
from idempotency.stores.audit_stream import drain_audits
from ordering.models import (
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    PaymentCallback,
)
from tests.payments.helpers import paying_order, post_callback, signed
from tests.support.waiting import DEADLINE_SECONDS, wait_until

CALLERS = 20


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_identical_callbacks_make_one_paid_transition(tenant, menu):
    # given an order waiting for its payment, and the provider's signed "succeeded" event
    order, payment = paying_order(tenant, menu["pizza"])
    body, headers = signed(payment, event_id="evt_storm")
    barrier = threading.Barrier(CALLERS)
    results: list[object] = [None] * CALLERS

    def deliver(i: int) -> None:
        try:
            barrier.wait()
            results[i] = post_callback(APIClient(), body, headers)
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    # when 20 deliveries arrive at the same instant, each on its own database connection
    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # then every delivery got a 200, exactly one applied it and 19 were duplicates
    assert [getattr(r, "status_code", r) for r in results] == [200] * CALLERS
    outcomes = sorted(r.json()["result"] for r in results)
    assert outcomes == ["applied"] + ["duplicate"] * (CALLERS - 1)
    # and the database holds one PAID transition, one payment, one inbox row, one event
    assert order.payments.count() == 1
    assert Payment.objects.for_tenant(tenant).get().status == Payment.Status.SUCCEEDED
    paid = OrderTransition.objects.for_tenant(tenant).filter(order=order, to_status="PAID")
    assert paid.count() == 1
    assert order.__class__.all_tenants.get(pk=order.pk).status == OrderStatus.PAID
    assert PaymentCallback.objects.for_tenant(tenant).count() == 1
    assert (
        OutboxEvent.objects.for_tenant(tenant).filter(event_type=EventType.ORDER_PAID).count() == 1
    )
    # and each absorbed duplicate is audited for staff
    drain_audits()
    hits = DuplicateAudit.objects.filter(tenant_key=str(tenant.pk), outcome="HIT")
    assert hits.count() == CALLERS - 1


@pytest.mark.django_db(transaction=True)
def test_a_callback_locks_the_order_before_the_payment(tenant, menu):
    # given an order waiting for its payment, whose row another transaction holds (as a
    # cancel's conditional update does before it voids the payment)
    order, payment = paying_order(tenant, menu["pizza"])
    body, headers = signed(payment)
    with psycopg.connect(connection.connection.info.dsn) as holder:
        holder.execute(
            f'SELECT 1 FROM "{Order._meta.db_table}" WHERE id = %s FOR UPDATE', [order.pk]
        )
        # when the provider's callback arrives meanwhile
        delivery = threading.Thread(target=_deliver_on_own_connection, args=(body, headers))
        delivery.start()
        wait_until(
            lambda: _waiting_for_a_lock(holder),
            what="the callback waiting for the order's lock",
        )
        # then it waits on the order without having taken the payment first: the holder can
        # still lock the payment (as a cancel voids it), and no deadlock is possible
        holder.execute(
            f'SELECT 1 FROM "{Payment._meta.db_table}" WHERE id = %s FOR UPDATE NOWAIT',
            [payment.pk],
        )
        holder.rollback()
    delivery.join(DEADLINE_SECONDS)
    # and once the holder lets go, the callback applies
    assert Payment.objects.for_tenant(tenant).get().status == Payment.Status.SUCCEEDED
    assert Order.all_tenants.get(pk=order.pk).status == OrderStatus.PAID


def _deliver_on_own_connection(body: bytes, headers: dict[str, str]) -> None:
    try:
        assert post_callback(APIClient(), body, headers).json()["result"] == "applied"
    finally:
        connection.close()


def _waiting_for_a_lock(observer: psycopg.Connection) -> bool:
    with psycopg.connect(observer.info.dsn, autocommit=True) as watcher:
        [(waiting,)] = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchall()
    return waiting > 0
