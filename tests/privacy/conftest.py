"""Helpers for the data-protection tests: every Redis key of a tenant on every node, with
what it holds, whatever the topology."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from idempotency import erasure
from idempotency.core.outcomes import StoredResponse
from idempotency.stores import nodes as stores
from idempotency.stores.local_cache import InvalidationListener, LocalResultCache
from idempotency.stores.redis_store import PACKED_MARKER, unpack_reply
from tests.conftest import use_topology


def tenant_keys(tenant_key: str) -> dict[bytes, bytes]:
    """Every key under the tenant's hash tag on every node or cluster primary, with its
    content (a hash's fields and values, a string's value) joined into bytes; a stored reply
    as written before it was compressed (a search of the packed bytes finds nothing)."""
    found: dict[bytes, bytes] = {}
    for client in erasure.node_clients():
        for pattern in erasure.tenant_key_patterns(tenant_key):
            for key in client.scan_iter(match=pattern, count=1000):
                kind = client.type(key)
                if kind == b"hash":
                    content = b"|".join(
                        k + b"=" + _plain(v) for k, v in client.hgetall(key).items()
                    )
                elif kind == b"string":
                    content = client.get(key) or b""
                else:
                    content = kind
                found[key] = content
    return found


@pytest.fixture(autouse=True)
def no_requests_in_flight(settings: Any) -> None:
    """No request of a tenant runs in these tests while it is offboarded: its offboarding need
    not wait for them before its last sweep (``OFFBOARDING_DRAIN_SECONDS``)."""
    settings.OFFBOARDING_DRAIN_SECONDS = 0


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


def _plain(value: bytes) -> bytes:
    return unpack_reply(value).to_bytes() if value.startswith(PACKED_MARKER) else value


def dropped_by_another_process(tenant_key: str, key: str, action: Callable[[], Any]) -> bool:
    """Whether a second process's local cache, holding ``key`` and listening on the tenant's
    node for invalidations, drops it when ``action`` runs (waited for up to 10 s)."""
    node = stores.node_for(tenant_key)
    cache = LocalResultCache()
    listener = InvalidationListener(node.store.client, cache, channel=node.store.channel)
    listener.start()
    try:
        assert listener.wait_subscribed(5)
        stored = StoredResponse(status=201, body=b"x")
        cache.put(key, fingerprint="f", fingerprint_version=1, response=stored)
        action()
        deadline = time.monotonic() + 10
        while cache.get(key) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        return cache.get(key) is None
    finally:
        listener.stop()
