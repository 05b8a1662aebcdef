"""The demo's simulated provider confirms a payment by itself, *after* the configured delay, so
PAYING is visible: in eager mode (no broker, the bare-machine demo) as with a worker
(tests/workers/test_celery_worker.py)."""

from __future__ import annotations

import threading

import pytest

from ordering.background import dispatch
from ordering.models import Order, OrderStatus, OrderTransition
from tests.payments.helpers import paying_order
from tests.support.broker import sending_to
from tests.support.ports import free_port

S = OrderStatus
DELAY = 1.5


def wait_for_delayed_tasks(*, timeout: float = 30) -> None:
    """Join the timer threads that run delayed tasks: the confirmation and everything it
    triggers after commit have finished (none of it may outlive the test's database)."""
    for thread in threading.enumerate():
        if thread.name.startswith(dispatch.DELAYED_THREAD_PREFIX):
            thread.join(timeout)
            assert not thread.is_alive(), f"{thread.name} still running after {timeout} s"


def seconds_in_paying(order: Order) -> float:
    moves = {t.to_status: t.at for t in OrderTransition.all_tenants.filter(order=order)}
    return (moves[S.PAID] - moves[S.PAYING]).total_seconds()


@pytest.mark.django_db(transaction=True)
def test_eager_mode_confirms_after_the_delay_not_at_once(settings, tenant, menu):
    settings.SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS = DELAY
    order, _ = paying_order(tenant, menu["pizza"])
    wait_for_delayed_tasks()
    assert Order.all_tenants.get(pk=order.pk).status == S.PAID
    assert seconds_in_paying(order) >= DELAY
    [paid] = OrderTransition.all_tenants.filter(order=order, to_status=S.PAID)
    assert paid.actor == "provider:simulated"


@pytest.mark.django_db(transaction=True)
def test_a_payment_started_while_the_broker_is_down_is_confirmed_after_the_delay(
    settings, tenant, menu, monkeypatch
):
    # given the demo's auto-confirming provider, and a broker nothing listens for (Redis down:
    # the confirmation's countdown message cannot be sent)
    settings.SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS = DELAY
    monkeypatch.setattr(dispatch, "_broker", dispatch.broker_breaker())  # pauses no other test
    with sending_to(f"redis://127.0.0.1:{free_port()}/0"):
        # when a payment starts
        order, _ = paying_order(tenant, menu["pizza"])
    # then the provider still confirms it by itself, no sooner than the delay (it was left
    # PAYING until the reconciliation, which found nothing in the provider's books either)
    wait_for_delayed_tasks()
    assert Order.all_tenants.get(pk=order.pk).status == S.PAID
    assert seconds_in_paying(order) >= DELAY
