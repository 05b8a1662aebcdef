"""Metrics of the ordering app: FSM conflicts (counted in-process) and, read from the database
at scrape time, the outbox lag and the dead letters (they must be true across all processes,
so they are not counters kept by any one of them)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from django.db.models import Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ordering.models import DeadLetter, OutboxEvent

fsm_conflicts = Counter(
    "ordering_fsm_conflicts_total",
    "Order moves refused with ORDER_STATUS_CONFLICT (not allowed now, or lost a race)",
    ["tenant"],
)


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = OutboxEvent._default_manager.filter(published_at__isnull=True)
        oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
        lag = (timezone.now() - oldest).total_seconds() if oldest else 0.0
        yield GaugeMetricFamily(
            "ordering_outbox_pending", "Outbox events not yet published", value=pending.count()
        )
        yield GaugeMetricFamily(
            "ordering_outbox_lag_seconds", "Age of the oldest unpublished outbox event", value=lag
        )
        yield GaugeMetricFamily(
            "ordering_dead_letters",
            "Dead letters waiting for staff (requeue or discard)",
            value=DeadLetter._default_manager.filter(state=DeadLetter.State.OPEN).count(),
        )


@cache
def database_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return registry
