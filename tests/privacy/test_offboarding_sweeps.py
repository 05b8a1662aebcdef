"""A tenant being offboarded holds back no other tenant's sweep.

Its rows are fenced (:mod:`tenants.write_fence`): a sweep across tenants that picked one of
them could not record what it did with it, so the row stayed first in the sweep's order and
every run stopped on it (or spent its batch on it), and no other restaurant's row was swept
until the offboarding deleted it. Each test gives the leaving restaurant the row a sweep would
take first and another restaurant a row that is due, then runs the sweep once.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from ordering.background.consumers import ConsumeResult
from ordering.background.outbox import sweep_outbox
from ordering.background.tasks import handle_outbox_event
from ordering.expiry import expire_unpaid_orders
from ordering.models import (
    Compensation,
    DeadLetter,
    EventType,
    Order,
    OrderStatus,
    OutboxEvent,
    Payment,
)
from ordering.payments.capture_refunds import resend_due_capture_refunds
from ordering.payments.reconciliation import reconcile_payments
from ordering.services.lifecycle import cancel_order
from tenants.models import Tenant
from tests.conftest import menu_for
from tests.payments.helpers import paid_order, paying_order
from tests.payments.test_capture_refunds import capture, refunds
from tests.payments.test_reconciliation import paid_without_callback
from tests.saga.test_outbox import cancelled_paid_order, sent_and_lost

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("celery_eager")]


@pytest.fixture
def leaving_and_staying(make_tenant):
    return make_tenant(slug="leaving"), make_tenant(slug="staying")


def offboarding(tenant: Tenant) -> None:
    """The tenant's offboarding has suspended it: its rows are fenced from here on."""
    Tenant.objects.filter(pk=tenant.pk).update(status=Tenant.Status.OFFBOARDING)


def test_an_event_of_a_leaving_tenant_holds_back_no_other_event_s_send(
    leaving_and_staying, settings
):
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    leaving, staying = leaving_and_staying
    # given each restaurant's cancel event sent and lost, the leaving one's due first
    stuck = cancelled_paid_order(leaving, menu_for(leaving))
    due = cancelled_paid_order(staying, menu_for(staying))
    sent_and_lost(stuck, minutes_ago=12)
    sent_and_lost(due, minutes_ago=11)
    offboarding(leaving)
    # when the sweeper runs, then the staying restaurant's event is sent (and consumed)
    assert sweep_outbox() == 1
    assert OutboxEvent.all_tenants.get(pk=due.pk).consumed_at is not None
    # and the leaving one's is left to its offboarding, as it was
    assert OutboxEvent.all_tenants.get(pk=stuck.pk).publish_attempts == 1


def test_a_payment_of_a_leaving_tenant_holds_back_no_other_payment_s_check(
    leaving_and_staying, settings
):
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 600
    leaving, staying = leaving_and_staying
    # given each restaurant's payment whose callback was lost, the leaving one's due first
    _, stuck = paid_without_callback(leaving, menu_for(leaving)["pizza"])
    order, _ = paid_without_callback(staying, menu_for(staying)["pizza"])
    offboarding(leaving)
    # when reconciliation runs, then the staying restaurant's order is paid
    assert reconcile_payments(now=timezone.now() + timedelta(seconds=700)) == {"applied": 1}
    assert Order.all_tenants.get(pk=order.pk).status == OrderStatus.PAID
    # and the leaving one's payment is left to its offboarding, unasked
    assert Payment.all_tenants.get(pk=stuck.pk).checked_at is None


def test_orders_of_a_leaving_tenant_take_no_other_order_s_place_in_the_unpaid_expiry(
    leaving_and_staying, settings
):
    settings.UNPAID_ORDER_EXPIRY_SECONDS = 60
    leaving, staying = leaving_and_staying
    # given an unpaid order of each restaurant, the leaving one's the older
    stuck, _ = paying_order(leaving, menu_for(leaving)["pizza"])
    order, _ = paying_order(staying, menu_for(staying)["pizza"])
    Order.all_tenants.filter(pk__in=[stuck.pk, order.pk]).update(status=OrderStatus.CREATED)
    Payment.all_tenants.all().delete()
    Order.all_tenants.filter(pk=order.pk).update(created_at=timezone.now() - timedelta(hours=1))
    Order.all_tenants.filter(pk=stuck.pk).update(created_at=timezone.now() - timedelta(hours=2))
    offboarding(leaving)
    # when the sweep expires one order a run, then it is the staying restaurant's
    assert expire_unpaid_orders(batch=1) == 1
    assert Order.all_tenants.get(pk=order.pk).status == OrderStatus.CANCELLED
    assert Order.all_tenants.get(pk=stuck.pk).status == OrderStatus.CREATED


def test_a_refund_of_a_leaving_tenant_holds_back_no_other_refund_s_resend(
    leaving_and_staying, settings, django_capture_on_commit_callbacks
):
    leaving, staying = leaving_and_staying
    # given each restaurant's capture after a cancel, whose refund's message was never sent,
    # the leaving one's the older
    for tenant in (leaving, staying):
        order, payment = paying_order(tenant, menu_for(tenant)["pizza"])
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
        with django_capture_on_commit_callbacks(execute=False):
            assert capture(payment) == "conflict"
    Compensation.all_tenants.filter(tenant=leaving).update(
        updated_at=timezone.now() - timedelta(hours=1)
    )
    offboarding(leaving)
    # when the resend sweep runs, then the staying restaurant's refund is sent and made
    later = timezone.now() + timedelta(seconds=settings.SAGA_RETRY_MAX_SECONDS + 61)
    assert resend_due_capture_refunds(now=later) == 1
    assert len(refunds()) == 1
    assert Compensation.all_tenants.get(tenant=staying).status == Compensation.Status.DONE


@pytest.mark.django_db(transaction=True)  # no test transaction for a refused write to break
def test_an_event_delivered_after_its_restaurant_s_tables_closed_is_left_to_the_offboarding(
    leaving_and_staying, caplog
):
    """(red without the fence's case in the task: the consumer's writes were refused, retried
    ``SAGA_MAX_RETRIES`` times, and the last attempt's bookkeeping was refused too, so the task
    ended in an error with a traceback, for an event the offboarding deletes anyway)"""
    leaving, _ = leaving_and_staying
    # given a paid order's event (consumed once its order committed), delivered again once
    # its restaurant's rows are fenced, as the broker may
    paid_order(leaving, menu_for(leaving)["pizza"])
    event = OutboxEvent.all_tenants.get(tenant=leaving, event_type=EventType.ORDER_PAID)
    OutboxEvent.all_tenants.filter(pk=event.pk).update(consumed_at=None)
    offboarding(leaving)
    # when the worker consumes it, then it ends at once, no retry and no dead letter
    with caplog.at_level(logging.INFO, logger="ordering.background.tasks"):
        result = handle_outbox_event.apply(args=[event.pk])
    assert result.get() == ConsumeResult.TENANT_LEAVING
    assert result.state == "SUCCESS"
    assert not DeadLetter.objects.exists()
    # and says so in one line, no traceback
    [line] = [r for r in caplog.records if r.name == "ordering.background.tasks"]
    assert str(event.pk) in line.getMessage()
    assert line.levelno == logging.INFO and line.exc_info is None
    # the event stays as it was, for the offboarding to delete with the rest
    assert OutboxEvent.all_tenants.get(pk=event.pk).consumed_at is None
