"""A Redis Cluster's connections read each reply within the socket timeout in all, as a
standalone node's do (``idempotency/stores/reply_deadline.py``), over TCP and over TLS.

A one-master cluster holding every slot stands in for a cluster: its slot map announces the
address the test chooses, so the client talks to it through a trickling proxy, or over TLS.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from idempotency.stores.nodes import REDIS_UNAVAILABLE
from idempotency.stores.reply_deadline import DeadlineConnection, DeadlineSSLConnection
from tenants import redis_routing
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode, start_cluster, wait_until
from tests.support.slow_proxy import SlowProxy

SOCKET_TIMEOUT = 0.5


def own_every_slot(node: redis.Redis, announced_port: int) -> None:
    """Make ``node`` a cluster of one that names itself ``announced_port`` in its slot map."""
    node.config_set("cluster-announce-port", announced_port)
    node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    wait_until(lambda: node.cluster("info")["cluster_state"] == "ok", what="one-node cluster")


def node_connection_classes(client: RedisCluster) -> set[type]:
    return {n.redis_connection.connection_pool.connection_class for n in client.get_nodes()}


@pytest.fixture
def timeout(settings) -> float:
    settings.REDIS_SOCKET_TIMEOUT = SOCKET_TIMEOUT
    return SOCKET_TIMEOUT


@pytest.fixture
def trickling_cluster() -> Iterator[SlowProxy]:
    node = RedisNode(cluster=True).start()
    proxy = SlowProxy(node.port)
    try:
        own_every_slot(node.client(), proxy.port)
        yield proxy
    finally:
        proxy.close()
        node.remove()


def test_a_trickled_reply_from_a_cluster_node_times_out(trickling_cluster, timeout) -> None:
    # given the platform's cluster client, talking to the node through the proxy
    client = redis_routing._cluster_client(trickling_cluster.url)
    client.set("k", "v" * 20)
    assert node_connection_classes(client) == {DeadlineConnection}
    # when the node sends its replies a byte every 0.2 s (each read well within 0.5 s)
    trickling_cluster.trickle = 0.2
    # then the reply (27 bytes: over 5 s) fails as a silent node's does (the slot map read
    # again after it, through the same node, fails too: an outage to every caller), so the
    # node's breaker hears of it, instead of holding the request until gunicorn kills the worker
    with pytest.raises(REDIS_UNAVAILABLE):
        client.get("k")
    trickling_cluster.trickle = 0.0
    # and a prompt node is answered again
    wait_until(lambda: client.get("k") == b"v" * 20, what="the cluster answering again")


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[int]:
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
            "-out", str(tmp_path / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    plain = free_port()
    tls = free_port()
    node = subprocess.Popen(
        [
            "redis-server", "--port", str(plain), "--tls-port", str(tls),
            "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
            "--tls-cert-file", str(tmp_path / "cert.pem"),
            "--tls-key-file", str(tmp_path / "key.pem"),
            "--tls-ca-cert-file", str(tmp_path / "cert.pem"),
            "--tls-auth-clients", "no", "--tls-cluster", "yes",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        admin = redis.Redis(port=plain, socket_timeout=1, socket_connect_timeout=1)
        wait_until(admin.ping, what=f"redis-server :{plain}")
        own_every_slot(admin, tls)
        yield tls
    finally:
        node.terminate()
        node.wait(10)


def test_a_tls_cluster_is_spoken_to_over_tls_with_the_reply_deadline(tls_cluster, timeout):
    # redis-py lets a rediss:// URL's own connection class win over the one it is given
    client = redis_routing._cluster_client(f"rediss://127.0.0.1:{tls_cluster}?ssl_cert_reqs=none")
    client.set("k", "v")
    assert client.get("k") == b"v"
    assert node_connection_classes(client) == {DeadlineSSLConnection}


@pytest.fixture
def cluster_with_a_silent_master() -> Iterator[tuple[list[RedisNode], SlowProxy]]:
    """Three masters; the second is reached through the proxy only (it announces its port)."""
    nodes = start_cluster(3)
    proxy = SlowProxy(nodes[1].port)
    try:
        nodes[1].client().config_set("cluster-announce-port", proxy.port)
        wait_until(
            lambda: all(
                any(s[2][1] == proxy.port for s in n.client().execute_command("CLUSTER SLOTS"))
                for n in nodes
            ),
            what="every node to announce the proxy",
        )
        yield nodes, proxy
    finally:
        proxy.close()
        for node in nodes:
            node.remove()


def test_a_master_that_does_not_answer_costs_one_timeout_per_call(
    cluster_with_a_silent_master, timeout
) -> None:
    # given the platform's cluster client (started from that master, as REDIS_CLUSTER_URL may
    # name any node) and a key on the master behind the proxy
    nodes, proxy = cluster_with_a_silent_master
    client = redis_routing._cluster_client(proxy.url)
    key = next(
        f"k{i}" for i in range(10_000) if client.get_node_from_key(f"k{i}").port == proxy.port
    )
    client.set(key, "v" * 20)
    admin = nodes[1].client()  # one connection of its own, left out of the count below
    admin.config_resetstat()
    # when that master's replies stop arriving within the timeout (27 bytes, one per 0.2 s)
    proxy.trickle = 0.2
    # then the call fails at its first timeout, as a standalone node's does: the slot map is
    # read again (from the other masters) for the next call, but the command is not sent to
    # the same silent master again, which dialled it anew and waited a second timeout (every
    # engine call to it 2 s instead of 1 s, an order 4 s, until the breaker opened)
    with pytest.raises(REDIS_UNAVAILABLE):
        client.get(key)
    proxy.trickle = 0.0
    assert admin.info("stats")["total_connections_received"] == 0


def test_a_silent_startup_node_is_dialled_once_per_retry_period_not_per_call(
    cluster_with_a_silent_master, timeout
) -> None:
    # given a process whose cluster client has not read the slot map yet (a worker started
    # during the outage), from a REDIS_CLUSTER_URL naming the master that stopped answering
    nodes, proxy = cluster_with_a_silent_master
    admin = nodes[1].client()  # one connection of its own, left out of the count below
    admin.config_resetstat()
    proxy.trickle = 0.2
    client = redis_routing._cluster_client(proxy.url)
    # when calls follow each other (each request makes several: the rate limiter, the breaker's
    # node lookup, the claim, and the process's own listeners and heartbeat besides)
    for _ in range(4):
        with pytest.raises(REDIS_UNAVAILABLE):
            client.get("k")
    # then only the first waited on the node; the others failed at once, as calls to a node
    # behind an open breaker do, where each one dialled it and waited a socket timeout of its
    # own (queued behind the others' on the client's lock): 17 s per order on such a worker
    assert admin.info("stats")["total_connections_received"] == 1
    # and once the node answers again the slot map is read and the cluster served
    proxy.trickle = 0.0
    wait_until(lambda: _answers(client), what="the cluster answering again")


def _answers(client: RedisCluster) -> bool:
    try:
        return client.get("k") is None
    except REDIS_UNAVAILABLE:
        return False
