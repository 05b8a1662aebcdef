"""Retention metrics for /metrics, read from the database at scrape time so they are true
whichever process purged: rows purged so far (a counter, from :class:`RetentionTally`) and rows
past their retention still waiting (a gauge; a growing value means the purge falls behind)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tenants.models import RetentionTally
from tenants.retention import KINDS, overdue_rows


class RetentionCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        purged = CounterMetricFamily(
            "retention_purged_rows",
            "Rows the retention purge deleted, per kind",
            labels=["kind"],
        )
        tallies = dict(RetentionTally.objects.values_list("kind", "rows_purged"))
        for kind in KINDS:
            purged.add_metric([kind], tallies.get(kind, 0))
        yield purged
        overdue = GaugeMetricFamily(
            "retention_overdue_rows",
            "Rows past their retention not purged yet, per kind",
            labels=["kind"],
        )
        for kind, rows in overdue_rows().items():
            overdue.add_metric([kind], rows)
        yield overdue


@cache
def retention_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RetentionCollector())
    return registry
