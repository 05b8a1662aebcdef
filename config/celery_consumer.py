"""The worker survives losing its Redis broker while it holds a message.

After a lost connection, Celery 5.7's consumer drops it (``collect()``) and closes it, while
the worker still holds messages of it: one due later (a saga step's retry, a payment's
confirmation, by countdown) or a task the pool is running. Handing them back on the close, and
acking a finished one, go through the channel of the closed connection, and kombu read that
connection's parameters as ``None``: an ``AttributeError``, not a connection error, which the
close and the ack handlers do not expect, so the worker stopped with "Unrecoverable error"
instead of the reconnecting that ``broker_connection_max_retries=None`` asks for. A Redis
restart or failover then left the outbox and the sagas without a worker.

Here that channel raises a connection error instead: the close goes on, the ack is logged as
failed, and the messages it could not settle stay in the broker's unacked set and return to
the queue after the visibility timeout, as after a worker's crash (or are gone with a Redis
that lost its data, which the outbox's resend covers: ``ordering/background/outbox.py``).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as redis_transport
from redis.exceptions import ConnectionError as RedisConnectionError

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


# Applied in the worker only, as it starts (the worker_init handler of config/celery.py).
redis_transport.Channel._connparams = _parameters_of_a_live_connection  # type: ignore[method-assign]
