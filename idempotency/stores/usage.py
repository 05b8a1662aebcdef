"""How much each tenant keeps, for ``/metrics``: idempotency records and Redis keys.

Neither count is made afresh by every scrape:

- **Records** (``idempotency_tenant_records``): one ``GROUP BY tenant_key`` over the whole
  record table, at most once per ``USAGE_CACHE_SECONDS`` (60 s) per process; in between, a
  scrape answers the last count. The scrape that runs it pays for reading the table (0.5 to 1 s
  at 3 million records). Rows past their expiry that the purge has not deleted yet count (they
  are still stored).
- **Redis keys** (``idempotency_tenant_redis_keys``): a census walks each node's keyspace with
  ``SCAN``, at most ``USAGE_SCAN_KEYS`` keys (10,000) further per scrape, and the gauge shows the
  counts of the last *complete* pass, with its age (``idempotency_redis_key_census_age_seconds``,
  counted on the process's monotonic clock, so a step of the wall clock does not move it).
  A node of K keys is thus counted afresh every K / 10,000 scrapes answered by the same process
  (each process walks on its own). A node that fails or times out is skipped for that scrape
  (its last complete pass stays, and ages): the scrape still answers, with the breaker states
  that say what is wrong. A key belongs to the tenant of its hash tag, ``{t:<tenant>}``
  or ``{t:<tenant>:<bucket>}``: idempotency entries, tokens, the token quota ledger and rate-limit
  counters; other keys are not counted.

The gauges need prometheus-client (the engine's ``metrics`` extra), as ``/metrics`` does: the
host's metrics view imports this module, nothing else does.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db.models import Count
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis.cluster import RedisCluster

from idempotency.core.conf import engine_hook, engine_setting
from idempotency.models import IdempotencyRecord
from idempotency.stores.nodes import REDIS_UNAVAILABLE, breaker_open, node_name

logger = logging.getLogger(__name__)

_TENANT_TAG = re.compile(rb"\{t:([^}:]+)(?::\d+)?\}")
_SCAN_BATCH = 1000  # keys asked of one SCAN call


@dataclass
class KeyCensus:
    """One node's walk through its keyspace, a bounded step at a time."""

    cursor: int = 0
    partial: Counter[str] = field(default_factory=Counter)
    complete: dict[str, int] | None = None
    completed_at: float | None = None  # time.monotonic(): an age, whatever the wall clock does

    def advance(self, client: Any, budget: int) -> None:
        """Read at most about ``budget`` more keys (``ceil(budget / 1000)`` SCAN calls)."""
        for _ in range(math.ceil(budget / _SCAN_BATCH)):
            self.cursor, keys = client.scan(self.cursor, count=_SCAN_BATCH)
            for key in keys:
                match = _TENANT_TAG.search(key)
                if match:
                    self.partial[match.group(1).decode("utf-8", "replace")] += 1
            if self.cursor == 0:
                self.complete, self.completed_at = dict(self.partial), time.monotonic()
                self.partial = Counter()
                return


class TenantUsage:
    """The process's cached record counts and its key census per node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, int] = {}
        self._records_at = float("-inf")
        self._census: dict[str, KeyCensus] = {}

    def records(self) -> dict[str, int]:
        """Records per tenant, counted at most once per ``USAGE_CACHE_SECONDS``."""
        with self._lock:
            if time.monotonic() - self._records_at >= engine_setting("USAGE_CACHE_SECONDS"):
                rows = IdempotencyRecord.objects.values("tenant_key").annotate(n=Count("id"))
                self._records = {row["tenant_key"]: row["n"] for row in rows}
                self._records_at = time.monotonic()
            return dict(self._records)

    def census(self) -> dict[str, KeyCensus]:
        """Every node's census, each advanced by one bounded step. An unreachable node keeps
        its last complete pass (its age grows), as does one whose breaker is open (not even
        tried): a scrape during an outage still answers."""
        budget = engine_setting("USAGE_SCAN_KEYS")
        with self._lock:
            for name, client in _node_clients():
                census = self._census.setdefault(name, KeyCensus())
                if breaker_open(name):
                    continue
                try:
                    census.advance(client, budget)
                except REDIS_UNAVAILABLE as exc:
                    logger.warning("key census of %s skipped: %s", name, exc)
            return dict(self._census)

    def reset(self) -> None:
        with self._lock:
            self._records, self._records_at, self._census = {}, float("-inf"), {}


def _node_clients() -> Iterator[tuple[str, Any]]:
    """(name, client) of every standalone node; a cluster's primaries one by one."""
    hook = engine_hook("ALL_REDIS_CLIENTS")
    for client in hook() if hook else []:
        if isinstance(client, RedisCluster):
            for node in client.get_primaries():
                yield f"cluster:{node.name}", client.get_redis_connection(node)
        else:
            yield node_name(client), client


class TenantUsageCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        records = GaugeMetricFamily(
            "idempotency_tenant_records",
            f"Idempotency records stored per tenant (counted every "
            f"{engine_setting('USAGE_CACHE_SECONDS')} s at most)",
            labels=["tenant"],
        )
        for tenant, count in sorted(usage.records().items()):
            records.add_metric([tenant], count)
        yield records
        keys = GaugeMetricFamily(
            "idempotency_tenant_redis_keys",
            "Redis keys per tenant on each node, from the last complete census pass",
            labels=["tenant", "node"],
        )
        age = GaugeMetricFamily(
            "idempotency_redis_key_census_age_seconds",
            "Age of the last complete key census pass of each node",
            labels=["node"],
        )
        censuses = usage.census()  # may complete a pass now: read the clock after it
        now = time.monotonic()
        for node, census in sorted(censuses.items()):
            if census.complete is None or census.completed_at is None:
                continue
            for tenant, count in sorted(census.complete.items()):
                keys.add_metric([tenant, node], count)
            age.add_metric([node], now - census.completed_at)
        yield keys
        yield age


usage = TenantUsage()


@cache
def usage_registry() -> CollectorRegistry:
    """A registry of its own: these gauges are computed at scrape time, in the process that
    answers, not merged from every worker like the engine's counters."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TenantUsageCollector())
    return registry
