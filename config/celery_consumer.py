"""The worker's consumer, with two repairs: it survives losing its broker while it holds a message.

Celery 5.7's consumer closes the connection it lost before reconnecting
(``Consumer.on_connection_error_after_connected``). Closing the Redis channel puts the messages
the worker holds unacknowledged back on the queue, through a connection it builds from the
transport, which the consumer's ``collect()`` has just detached: kombu raises ``AttributeError``
there, not a connection error, so the close is not ignored and the worker stops with
"Unrecoverable error". A worker always holds such a message while a countdown runs (a saga
step's retry, a payment's confirmation), so a Redis restart or failover then stopped the
worker for good instead of the reconnecting that ``broker_connection_max_retries=None`` asks for.

Here a close that fails that way is logged and the reconnect goes on. The messages it could not
put back stay in the broker's unacked set and return to the queue after the visibility timeout,
as after a worker's crash (or are gone with a Redis that lost its data, which the outbox's
resend covers: ``ordering/background/outbox.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer
from kombu.transport import redis as redis_transport
from redis.exceptions import ConnectionError as RedisConnectionError

logger = logging.getLogger(__name__)

_connection_parameters = redis_transport.Channel._connparams


def _parameters_of_a_live_connection(channel: Any, asynchronous: bool = False) -> Any:
    """kombu's connection parameters of a Redis channel, or a connection error once the
    connection the channel belonged to was closed. kombu read them from the closed connection
    as ``None`` and raised ``AttributeError``: an ack of a task that finished after the
    consumer had dropped its lost broker connection (a restart under load) reached that
    channel, and no ack handler expects an ``AttributeError``, so the worker stopped
    ("Unrecoverable error"). As a connection error the ack is logged as failed (``Couldn't
    ack``), and the message, unacknowledged, returns after the visibility timeout."""
    if channel.connection is None or channel.connection.client is None:
        raise RedisConnectionError("the broker connection of this channel was closed")
    return _connection_parameters(channel, asynchronous)


# Loaded with the consumer, in the worker only (worker_consumer in config/celery.py).
redis_transport.Channel._connparams = _parameters_of_a_live_connection  # type: ignore[method-assign]


class BrokerLossConsumer(Consumer):
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        connection = self.connection
        if connection is not None:
            close = connection.close

            def close_detached() -> None:
                try:
                    close()
                except AttributeError:
                    logger.warning(
                        "could not hand the held messages back while closing the lost broker "
                        "connection; a broker that kept them requeues them after the visibility "
                        "timeout"
                    )

            connection.close = close_detached  # type: ignore[method-assign]
        super().on_connection_error_after_connected(exc)
