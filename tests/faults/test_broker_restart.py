"""A worker's broker (Redis) restarts, or is demoted by a failover, under a running worker.

A worker holds a message unacknowledged while its countdown runs (a saga step's retry, a
payment's confirmation). Celery 5.7's consumer, closing the connection it lost, failed to hand
such messages back and stopped the worker ("Unrecoverable error: AttributeError"), so a Redis
restart or failover left the outbox and the sagas without a worker until someone started one.
``config/celery_consumer.py`` keeps it reconnecting.

A failover demotes the old primary to a replica: Redis ends the worker's waiting ``BRPOP`` with
an error reply (``UNBLOCKED ... master -> replica``), which Celery counted as unrecoverable, and
the worker stopped too. ``broker_channel_error_retry`` makes such replies a reason to reconnect.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from config.celery import app
from tests.support.broker import sending_to
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import wait_until
from tests.workers.conftest import CeleryWorker

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


def test_a_worker_holding_a_message_keeps_working_after_its_broker_restarts(tmp_path: Path):
    node = RedisNode().start()
    worker = CeleryWorker(
        db_name=settings.DATABASES["default"]["NAME"],
        queue="broker-restart",
        log_dir=tmp_path,
        extra_env={"CELERY_BROKER_URL": node.url},
    )
    try:
        with sending_to(node.url):
            worker.start()
            # given a worker holding a message due in five minutes
            held = app.send_task(
                "ordering.drain_idempotency_audits", countdown=300, queue=worker.queue
            )
            wait_until(
                lambda: f"drain_idempotency_audits[{held.id}] received" in worker.log(),
                what="the worker holds the message",
            )
            # when its broker dies (SIGKILL) and comes back a little later, without its data
            assert node.process is not None
            node.process.kill()
            node.process.wait(5)
            node.process = None
            wait_until(
                lambda: "Connection to broker lost" in worker.log(),
                what="the worker sees the broker gone",
            )
            time.sleep(1)
            node.start()

            # then the worker reconnects and runs what it is sent next
            sent = app.send_task("ordering.sweep_outbox", queue=worker.queue)

            def alive_and_swept() -> bool:
                assert worker.process is not None
                if worker.process.poll() is not None:
                    raise AssertionError(f"the worker stopped:\n{worker.log()[-3000:]}")
                return f"sweep_outbox[{sent.id}] succeeded" in worker.log()

            wait_until(alive_and_swept, what="the worker runs a task sent after the restart")
            assert worker.process.poll() is None
    finally:
        worker.stop()
        node.remove()


def test_a_worker_keeps_working_after_a_failover_demotes_its_broker(tmp_path: Path):
    node = RedisNode().start()
    worker = CeleryWorker(
        db_name=settings.DATABASES["default"]["NAME"],
        queue="broker-demoted",
        log_dir=tmp_path,
        extra_env={"CELERY_BROKER_URL": node.url},
    )
    try:
        with sending_to(node.url):
            worker.start()
            # given a worker waiting for messages (BRPOP)
            # when a failover demotes its broker to a replica, and later it is a primary again
            node.client().replicaof("127.0.0.1", free_port())
            wait_until(
                lambda: "replica" in worker.log() or worker.process.poll() is not None,
                what="the worker's BRPOP ended by the demotion",
            )
            node.client().replicaof("no", "one")
            # then the worker is still there and runs what it is sent
            sent = app.send_task("ordering.sweep_outbox", queue=worker.queue)

            def alive_and_swept() -> bool:
                assert worker.process is not None
                if worker.process.poll() is not None:
                    raise AssertionError(f"the worker stopped:\n{worker.log()[-3000:]}")
                return f"sweep_outbox[{sent.id}] succeeded" in worker.log()

            wait_until(alive_and_swept, what="the worker runs a task sent after the failover")
    finally:
        worker.stop()
        node.remove()


def test_an_ack_on_the_channel_of_a_closed_broker_connection_does_not_stop_the_worker():
    """A task that finishes after the consumer dropped its lost broker connection acks on that
    connection's channel. kombu raised ``AttributeError`` there (``'NoneType' object has no
    attribute 'hostname'``, from the closed connection's parameters), which no ack handler
    expects, and the worker stopped ("Unrecoverable error"; seen in a full run, the broker
    restarting under load). Now it is a connection error: the ack is logged as failed, and the
    message, unacknowledged, comes back after the visibility timeout. The state is the one of
    that worker's traceback: the channel's pool disconnected, its connection closed."""
    import logging

    from kombu import Connection, Exchange, Queue

    import config.celery_consumer  # noqa: F401 - the worker loads it as it starts

    node = RedisNode().start()
    try:
        connection = Connection(node.url)
        queue = Queue("held", Exchange("held"), routing_key="held")
        with connection.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue.exchange, routing_key="held", declare=[queue])
        message = queue(connection.default_channel).get(no_ack=False)
        assert message is not None
        message.channel._disconnect_pools()
        connection.transport.client = None  # as kombu's close of the connection leaves it

        message.ack_log_error(logging.getLogger(__name__), connection.connection_errors)

        assert not message.acknowledged
        with redis.Redis.from_url(node.url) as client:
            assert client.hlen("unacked") == 1  # back on the queue after the visibility timeout
        connection.collect()  # drop it without the I/O a close would try
    finally:
        node.remove()
