"""Extra Redis servers on free loopback ports, started and stopped by the tests themselves.

Used for the sharded (3 standalone nodes) and clustered (3 masters) topologies, and for fault
tests that stop, restart or slow a node (RECIPES §3: stop with SIGTERM, fresh config dirs).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from tests.support import waiting
from tests.support.ports import free_port


class RedisNode:
    """One ``redis-server`` that a test owns: start, stop (SIGTERM), restart on the same port."""

    def __init__(self, *, cluster: bool = False, port: int | None = None) -> None:
        self.port = port or free_port()
        self.cluster = cluster
        self.dir = Path(tempfile.mkdtemp(prefix=f"redis-{self.port}-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisNode:
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
        ]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                str(free_port()),
            ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.client().ping(), what=f"redis-server :{self.port}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)


def wait_until(ready: Callable[[], object], *, what: str, timeout: float | None = None) -> None:
    """Wait for a Redis node or cluster to answer (connection errors mean "not yet")."""
    waiting.wait_until(
        ready,
        what=f"{what} ready",
        timeout=timeout,
        ignoring=(redis.ConnectionError, redis.TimeoutError, OSError),
    )


def start_cluster(masters: int = 3) -> list[RedisNode]:
    """A Redis Cluster of ``masters`` nodes, no replicas, ``cluster_state:ok`` on every node."""
    if shutil.which("redis-cli") is None:
        raise RuntimeError("redis-cli is needed to create a cluster (apt-get install redis-tools)")
    nodes = [RedisNode(cluster=True).start() for _ in range(masters)]
    subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "create",
            *[f"127.0.0.1:{n.port}" for n in nodes],
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for node in nodes:
        wait_until(
            lambda node=node: node.client().cluster("info")["cluster_state"] == "ok",
            what=f"cluster node :{node.port}",
        )
    return nodes
