"""Redis connections that read each reply within the socket timeout in all
(``idempotency/stores/reply_deadline.py``), against a real server behind a trickling proxy."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from idempotency.stores.reply_deadline import (
    DeadlineConnection,
    DeadlineSSLConnection,
    DeadlineUnixDomainSocketConnection,
    connection_class_for,
)
from tests.idempotency.conftest import RedisServer
from tests.support.slow_proxy import SlowProxy

SOCKET_TIMEOUT = 0.5


@pytest.fixture
def proxy(private_redis: RedisServer) -> Iterator[SlowProxy]:
    proxy = SlowProxy(private_redis.port)
    yield proxy
    proxy.close()


def client(proxy: SlowProxy) -> redis.Redis:
    return redis.Redis.from_url(
        proxy.url,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        connection_class=DeadlineConnection,
    )


def test_a_trickled_reply_times_out_though_every_read_gets_a_byte(proxy: SlowProxy) -> None:
    # given a connection made while the node answered promptly
    deadline = client(proxy)
    deadline.set("k", "v" * 20)
    # when the node sends its replies a byte every 0.2 s (each read well within 0.5 s)
    proxy.trickle = 0.2
    # then the reply (26 bytes: 5 s) fails as a silent node's does (redis-py's own timeout
    # bounds each read, and a plain connection would read it to its end)
    with pytest.raises(redis.TimeoutError):
        deadline.get("k")
    proxy.trickle = 0.0
    # and the connection it dropped is replaced: the next call is answered
    assert deadline.get("k") == b"v" * 20


def test_replies_within_the_timeout_and_pub_sub_polls_are_read_as_before(
    proxy: SlowProxy,
) -> None:
    deadline = client(proxy)
    assert deadline.ping() is True
    pubsub = deadline.pubsub()
    pubsub.subscribe("ch")
    assert pubsub.get_message(timeout=1.0)["type"] == "subscribe"
    # a poll longer than the socket timeout, with nothing to read, is no reply: it just waits
    assert pubsub.get_message(timeout=2 * SOCKET_TIMEOUT) is None
    deadline.publish("ch", "hello")
    assert pubsub.get_message(timeout=1.0)["data"] == b"hello"
    # nor is listen()'s wait for the next message, however long it idles (the Lua script
    # channel's listener waits so)
    later = threading.Timer(3 * SOCKET_TIMEOUT, lambda: deadline.publish("ch", "later"))
    later.start()
    assert next(m for m in pubsub.listen() if m["type"] == "message")["data"] == b"later"
    later.join()
    pubsub.close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h:6379/0", DeadlineConnection),
        ("rediss://h:6380/0", DeadlineSSLConnection),
        ("unix:///run/redis.sock?db=1", DeadlineUnixDomainSocketConnection),
    ],
    ids=["redis", "rediss", "unix"],
)
def test_each_url_scheme_gets_its_connection_class(url: str, expected: type) -> None:
    assert connection_class_for(url) is expected
    pool = redis.ConnectionPool.from_url(url, connection_class=connection_class_for(url))
    assert pool.connection_class is expected
