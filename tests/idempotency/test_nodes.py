"""Which Redis errors are a node's state, logged in a line (``nodes.node_cannot_serve``), and
which are a fault of the call, logged with their traceback: errors as a real server sends them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from idempotency.stores.nodes import node_cannot_serve
from tests.idempotency.conftest import RedisServer
from tests.support.ports import free_port


def error_of(call: Callable[[], object]) -> redis.RedisError:
    with pytest.raises(redis.RedisError) as raised:
        call()
    return raised.value


def test_a_node_that_refuses_or_is_gone_is_a_state_of_the_node(
    restartable_redis: RedisServer,
) -> None:
    client = redis.Redis.from_url(restartable_redis.url, socket_timeout=1.0)
    admin = redis.Redis.from_url(restartable_redis.url)
    write = lambda: client.set("k", "v")  # noqa: E731
    # full, with nothing it may evict
    admin.config_set("maxmemory", 1)
    assert node_cannot_serve(error_of(write))
    admin.config_set("maxmemory", 0)
    # demoted to a replica
    admin.replicaof("127.0.0.1", free_port())
    assert node_cannot_serve(error_of(write))
    admin.replicaof("no", "one")
    # a script of another client's running past the busy threshold (2 s, read-only)
    admin.config_set("busy-reply-threshold", 50)
    blocker = redis.Redis.from_url(restartable_redis.url, socket_timeout=5.0)
    busy = blocker.register_script(
        "local t = tonumber(redis.call('TIME')[1]) + 2 "
        "while tonumber(redis.call('TIME')[1]) < t do end"
    )
    runner = threading.Thread(target=lambda: busy(), daemon=True)
    runner.start()
    try:
        error = None
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            try:
                client.get("k")
            except redis.RedisError as exc:
                error = exc
            time.sleep(0.01)
        assert error is not None and str(error).startswith("BUSY ")
        assert node_cannot_serve(error)
    finally:
        runner.join(10)
    # gone
    restartable_redis.stop()
    assert node_cannot_serve(error_of(lambda: client.get("k")))


def test_a_fault_of_the_call_is_not(restartable_redis: RedisServer) -> None:
    client = redis.Redis.from_url(restartable_redis.url)
    client.set("s", "v")
    assert not node_cannot_serve(error_of(lambda: client.eval("return redis.call('NOPE')", 0)))
    assert not node_cannot_serve(error_of(lambda: client.hget("s", "f")))  # WRONGTYPE
