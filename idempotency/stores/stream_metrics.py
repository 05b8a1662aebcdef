"""Each node's audit stream as /metrics shows it, read when scraped.

The drain (:mod:`idempotency.stores.audit_stream`) usually runs in a Celery worker, which
serves no /metrics, so what it counts is seen by nobody; what waits in each stream, and for how
long, is read from the streams themselves here. Needs prometheus-client (the engine's
``metrics`` extra): the host's metrics view imports this module, nothing else does.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from idempotency.core.conf import engine_hook
from idempotency.models import AuditStreamCursor
from idempotency.stores.audit_stream import as_text, cursor_name, entry_id_parts, stream_key
from idempotency.stores.nodes import REDIS_UNAVAILABLE, breaker_open, node_name
from idempotency.stores.redis_store import is_cluster


class AuditStreamCollector(Collector):
    """Each node's audit stream as it is when /metrics is scraped: its entries, and how long
    the oldest one not yet copied (past the node's cursor) has waited. A node that does not
    answer, or whose breaker is open, is left out, and read unreachable (0) in
    ``idempotency_redis_node_reachable``, which is 1 for every node read: a breaker opens only
    on enough calls, so under light traffic a dead node opened none, and nothing said it was
    down."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        length = GaugeMetricFamily(
            "idempotency_audit_stream_length",
            "Entries in a node's audit stream (capped at AUDIT_STREAM_MAXLEN: alert well "
            "before it)",
            labels=["node"],
        )
        oldest = GaugeMetricFamily(
            "idempotency_audit_stream_oldest_seconds",
            "How long the oldest audit not yet copied into the database has waited in a "
            "node's stream (0: none waiting)",
            labels=["node"],
        )
        reachable = GaugeMetricFamily(
            "idempotency_redis_node_reachable",
            "Whether this scrape read the node (1), or it did not answer or the serving "
            "process's breaker has it out of use (0)",
            labels=["node"],
        )
        hook = engine_hook("ALL_REDIS_CLIENTS")
        cursors = dict(AuditStreamCursor.objects.values_list("stream", "last_id"))
        for client in hook() if hook else []:
            if breaker_open(node_name(client)):
                reachable.add_metric([node_name(client)], 0)
                continue
            try:
                entries = client.xlen(stream_key())
                first = client.xrange(
                    stream_key(), min=f"({cursors.get(cursor_name(client), '0-0')}", count=1
                )
                now = _node_now(client) if first else 0.0
            except REDIS_UNAVAILABLE:
                reachable.add_metric([node_name(client)], 0)
                continue
            waited = now - entry_id_parts(as_text(first[0][0]))[0] / 1000 if first else 0.0
            length.add_metric([node_name(client)], entries)
            oldest.add_metric([node_name(client)], max(waited, 0.0))
            reachable.add_metric([node_name(client)], 1)
        yield length
        yield oldest
        yield reachable


def _node_now(client: Any) -> float:
    """The clock of the node holding the stream, which numbered its entries: an entry's wait
    read on this server's clock was off by the skew between the two (an hour ahead, and an
    audit appended just now had waited an hour, paging IdempotencyAuditsNotDrained)."""
    if is_cluster(client):
        seconds, micros = client.time(target_nodes=client.get_node_from_key(stream_key()))
    else:
        seconds, micros = client.time()
    return int(seconds) + int(micros) / 1e6


@cache
def stream_registry() -> CollectorRegistry:
    """The registry /metrics adds for :class:`AuditStreamCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AuditStreamCollector())
    return registry
