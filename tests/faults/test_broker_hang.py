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

import pytest
from django.db import connections

from config.celery import app
from ordering.models import EventType, OutboxEvent
from ordering.services.lifecycle import cancel_order
from tests.payments.helpers import paid_order
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import DEADLINE_SECONDS

# transaction=True: the publish runs in a thread, on a connection of its own
pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def broker(settings) -> Iterator[RedisNode]:
    """The project's Celery app sending to a Redis of this test's (nothing consumes it)."""
    node = RedisNode().start()
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url, app.conf.task_always_eager = node.url, False
    app.amqp._producer_pool = None
    app._pool = None
    try:
        yield node
    finally:
        os.kill(node.process.pid, signal.SIGCONT)
        app.pool.force_close_all()
        app.conf.broker_url, app.conf.task_always_eager = saved
        app.amqp._producer_pool = None
        app._pool = None
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
