"""A broker that holds its connections open and never answers (a hung or paused Redis).

A request publishes its outbox event after its commit; with no socket timeout that publish
waited for ever, holding the gunicorn worker until it was killed and the client answered 500
for work that had committed. The publish now gives up within a few seconds: the event stays
unpublished for the sweeper, which sends it once the broker answers again.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from ordering.background import dispatch
from ordering.background.outbox import sweep_outbox
from ordering.models import EventType, OutboxEvent
from ordering.services.lifecycle import cancel_order
from tests.payments.helpers import paid_order
from tests.support.broker import sending_to
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import DEADLINE_SECONDS

# transaction=True: the publish runs in a thread, on a connection of its own
pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def broker(settings) -> Iterator[RedisNode]:
    """The project's Celery app sending to a Redis of this test's (nothing consumes it)."""
    node = RedisNode().start()
    try:
        with sending_to(node.url):
            try:
                yield node
            finally:  # awake before the pools close their connections to it
                os.kill(node.process.pid, signal.SIGCONT)
    finally:
        node.remove()


def test_a_publish_to_a_hung_broker_gives_up_and_leaves_the_event_to_the_sweeper(
    tenant, menu, broker
):
    order, _ = paid_order(tenant, menu["pizza"])
    # the broker hangs (SIGSTOP): the kernel still accepts connections, nothing answers
    os.kill(broker.process.pid, signal.SIGSTOP)
    # when a cancel commits and its after-commit publish meets the hung broker
    returned: list[bool] = []

    def cancel() -> None:
        try:
            cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
            returned.append(True)
        finally:
            connections.close_all()

    request = threading.Thread(target=cancel, daemon=True)
    request.start()
    request.join(DEADLINE_SECONDS)
    # then the publish gave up (it waited for ever) and the event waits for the sweeper
    assert not request.is_alive(), "the publish to a hung broker never returned"
    assert returned == [True]
    event = OutboxEvent.objects.for_tenant(tenant).get(event_type=EventType.CANCEL_REQUESTED)
    assert event.published_at is None and event.publish_attempts == 1
    assert "Timeout" in event.last_error, event.last_error


def test_after_a_failed_send_the_process_stops_sending_for_a_while_then_probes(
    tenant, menu, broker, monkeypatch
):
    """While the broker hangs, only the first send waits for its socket timeout: the next ones
    in this process are not even tried (each would hold its request as long), nor does a sweep
    go on sending into it; after the pause one send probes the broker, and it works again (red
    without the pause: the second cancel's event was tried and timed out too)."""
    now = [0.0]
    monkeypatch.setattr(dispatch, "_broker", dispatch.broker_breaker(clock=lambda: now[0]))
    (first, _), (second, _) = paid_order(tenant, menu["pizza"]), paid_order(tenant, menu["pizza"])
    os.kill(broker.process.pid, signal.SIGSTOP)
    for order in (first, second):
        cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    events = OutboxEvent.objects.for_tenant(tenant).filter(event_type=EventType.CANCEL_REQUESTED)
    tried, untried = (events.get(order=first), events.get(order=second))
    assert tried.publish_attempts == 1 and "Timeout" in tried.last_error
    # the second was not tried: no attempt counted, no error, left to the sweeper
    assert untried.publish_attempts == 0 and untried.last_error == ""
    assert untried.last_publish_at is None and untried.published_at is None
    # a sweep in the pause sends nothing and claims nothing: neither a first send nor one
    # sent again (an event sent before the broker hung, unconsumed, due for its resend)
    unconsumed = OutboxEvent.objects.for_tenant(tenant).filter(consumed_at=None)
    resend = unconsumed.exclude(published_at=None).earliest("id")
    unconsumed.filter(pk=resend.pk).update(resend_at=timezone.now() - timedelta(seconds=1))
    assert sweep_outbox(grace_seconds=0) == 0
    assert events.get(pk=untried.pk).last_publish_at is None
    assert unconsumed.get(pk=resend.pk).publish_attempts == resend.publish_attempts
    # once the broker answers and the pause is over, the sweep sends both
    os.kill(broker.process.pid, signal.SIGCONT)
    now[0] += dispatch.BROKER_PAUSE_SECONDS
    assert sweep_outbox(grace_seconds=0) == 3  # the two cancels, the one sent again
    assert not events.filter(published_at=None).exists()
    assert not dispatch.broker_paused()
