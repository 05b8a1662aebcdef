"""Helpers for the data-protection tests: every Redis key of a tenant on every node, with
what it holds, whatever the topology."""

from __future__ import annotations

from typing import Any

import pytest

from idempotency import erasure
from tests.conftest import use_topology


def tenant_keys(tenant_key: str) -> dict[bytes, bytes]:
    """Every key under the tenant's hash tag on every node or cluster primary, with its
    content (a hash's fields and values, a string's value) joined into bytes."""
    found: dict[bytes, bytes] = {}
    for client in erasure.node_clients():
        for pattern in erasure.tenant_key_patterns(tenant_key):
            for key in client.scan_iter(match=pattern, count=1000):
                kind = client.type(key)
                if kind == b"hash":
                    content = b"|".join(k + b"=" + v for k, v in client.hgetall(key).items())
                elif kind == b"string":
                    content = client.get(key) or b""
                else:
                    content = kind
                found[key] = content
    return found


@pytest.fixture(params=["single", "shards", "cluster"])
def topology(request: pytest.FixtureRequest, settings: Any) -> str:
    """Run a test on the suite's one Redis node, on three shards, and on a Redis Cluster."""
    if request.param == "shards":
        nodes = request.getfixturevalue("shard_nodes")
        for node in nodes:
            node.client().flushall()
        use_topology(settings, shards=[n.url for n in nodes])
    elif request.param == "cluster":
        nodes = request.getfixturevalue("cluster_nodes")
        use_topology(settings, cluster=nodes[0].url)
        for client in erasure.node_clients():
            client.flushall()
    return request.param
