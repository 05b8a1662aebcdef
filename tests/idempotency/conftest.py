"""Fixtures for the idempotency engine's tests: real Redis servers only, no fakes, no Django.

The shared Redis (``REDIS_URL``, default 127.0.0.1:6379) is used by other people's tests at the
same time, so tests here touch only keys under a per-test prefix and delete only those. What
would disturb others (``SCRIPT FLUSH``, ``CLIENT KILL TYPE pubsub``, stopping the server) runs
against a private ``redis-server`` that these fixtures start on a free loopback port, the way
the suite starts its extra nodes (DESIGN §6).

These modules do not need Django: run them alone with
``pytest tests/idempotency -p no:django --confcutdir=tests/idempotency`` (the confcutdir keeps
the suite-wide conftest, which imports Django models, out of the run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from idempotency.stores.redis_store import RedisIdempotencyStore
from tests.support.ports import free_port

SHARED_REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


class RedisServer:
    """A throwaway ``redis-server`` on loopback that nothing else talks to."""

    def __init__(self, *, cluster: bool = False) -> None:
        self.port = free_port()
        self.cluster = cluster
        self._dir = tempfile.mkdtemp(prefix="idem-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir,
        ]
        if self.cluster:
            # The bus port defaults to port + 10000, which may be taken or above 65535.
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                str(free_port()),
            ]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        try:
            self._wait(lambda client: client.ping())
            if self.cluster:
                self._assign_all_slots()
        except BaseException:
            self.remove()  # never leave a half-started server behind
            raise

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(5)
            self._process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _assign_all_slots(self) -> None:
        """Make a one-node cluster: enough for redis-py's RedisCluster and slot checks."""
        with redis.Redis(port=self.port) as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        # A master reports cluster_state:ok only ~2 s after it started (CLUSTER_WRITABLE_DELAY).
        self._wait(lambda client: client.cluster("INFO").get("cluster_state") == "ok")

    def _wait(self, ready: Callable[[redis.Redis], object]) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as client:
                    if ready(client):
                        return
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not get ready")
            time.sleep(0.02)


def _need_redis_server() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/ensure_services.sh installs it)")


@pytest.fixture(scope="session")
def redis_client() -> Iterator[redis.Redis]:
    """A client of the shared Redis; fails loudly if it is not running."""
    client = redis.Redis.from_url(SHARED_REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., redis.Redis]]:
    """New clients of the shared Redis, each with its own connection pool."""
    clients: list[redis.Redis] = []

    def make(url: str = SHARED_REDIS_URL, **kwargs: object) -> redis.Redis:
        client = redis.Redis.from_url(url, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def key_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A per-test key prefix with a tenant hash tag; its keys are deleted afterwards."""
    prefix = f"idem:{{t:test-{uuid.uuid4().hex}}}:"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def channel() -> str:
    """A per-test invalidation channel, so concurrent runs do not hear each other."""
    return f"idem:invalidate:test:{uuid.uuid4().hex}"


@pytest.fixture
def store(redis_client: redis.Redis, channel: str) -> RedisIdempotencyStore:
    return RedisIdempotencyStore(redis_client, channel=channel)


@pytest.fixture(scope="session")
def private_redis() -> Iterator[RedisServer]:
    """A private standalone server for the tests that flush scripts or kill clients."""
    _need_redis_server()
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture
def restartable_redis() -> Iterator[RedisServer]:
    """A private server of the test's own, which the test may stop and start again."""
    _need_redis_server()
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def cluster_client() -> Iterator[RedisCluster]:
    """A RedisCluster client of a private one-node cluster (all 16384 slots on one node)."""
    _need_redis_server()
    server = RedisServer(cluster=True)
    server.start()
    client = RedisCluster(host="127.0.0.1", port=server.port)
    yield client
    client.close()
    server.remove()
