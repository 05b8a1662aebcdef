"""The worker's consumer, with one repair: it survives losing its broker while it holds a message.

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

from celery.worker.consumer import Consumer

logger = logging.getLogger(__name__)


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
