"""Metrics of the ordering app: FSM conflicts and clock steps back (counted in-process) and,
read at scrape time, the outbox lag and its oldest event not consumed yet, the dead letters
and the payments waiting for their provider, with how late their reconciliation is (from the
database), the provider conflicts waiting for staff (from the database too), and the free
order-ID worker ids (from the lease stores): these must be true across
all processes, so they are not numbers kept by any one of them."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ordering.models import DeadLetter, OutboxEvent, Payment, ProviderConflict
from ordering.payments.capture_refunds import waiting_for_staff
from ordering.payments.due_checks import overdue_seconds, unanswered_seconds
from ordering.worker_ids import free_worker_ids

fsm_conflicts = Counter(
    "ordering_fsm_conflicts_total",
    "Order moves refused with ORDER_STATUS_CONFLICT (not allowed now, or lost a race)",
    ["tenant"],
)

clock_backsteps = Counter(
    "ordering_order_id_clock_backsteps_total",
    "Times the order-ID generator found the wall clock behind its latest reading: waited (a "
    "step up to ORDER_ID_MAX_CLOCK_BACKSTEP_MS) or refused (a larger one: no ID issued)",
    ["outcome"],
)
# Exported at 0 from the start: the clock alerts fire on increase(), and a series born with
# its first step back has no earlier sample, so that step would count as no increase.
for _outcome in ("waited", "refused"):
    clock_backsteps.labels(outcome=_outcome)


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
        # Published is not done: with the broker up and no worker running, every event is
        # published at once and waits in the queue. Read through the redelivery index (a
        # published row keeps resend_at until consumed), so a scrape reads only waiting rows.
        sent = OutboxEvent._default_manager.filter(
            consumed_at__isnull=True, resend_at__isnull=False
        ).aggregate(oldest=Min("created_at"))["oldest"]
        waiting = [when for when in (oldest, sent) if when is not None]
        yield GaugeMetricFamily(
            "ordering_outbox_unconsumed_oldest_seconds",
            "Age of the oldest outbox event no worker has finished with (published or not)",
            value=(timezone.now() - min(waiting)).total_seconds() if waiting else 0.0,
        )
        yield GaugeMetricFamily(
            "ordering_dead_letters",
            "Dead letters waiting for staff (requeue or discard)",
            value=DeadLetter._default_manager.filter(state=DeadLetter.State.OPEN).count(),
        )
        payments = Payment.all_tenants.filter(status=Payment.Status.PENDING)
        yield GaugeMetricFamily(
            "ordering_payments_pending",
            "Payments waiting for the provider (the diner has not paid, or its callback is late)",
            value=payments.count(),
        )
        started = payments.aggregate(oldest=Min("created_at"))["oldest"]
        yield GaugeMetricFamily(
            "ordering_payments_pending_oldest_seconds",
            "Age of the oldest payment still waiting for its provider: its order stays PAYING, "
            "holding its portions, until the provider settles it",
            value=(timezone.now() - started).total_seconds() if started else 0.0,
        )
        yield GaugeMetricFamily(
            "ordering_payments_reconcile_overdue_seconds",
            "How late the oldest due check of a payment at its provider is",
            value=overdue_seconds(),
        )
        yield GaugeMetricFamily(
            "ordering_payments_unanswered_seconds",
            "How long a provider has left a payment's check unanswered, the longest",
            value=unanswered_seconds(),
        )
        yield _conflicts_waiting()


def _conflicts_waiting() -> GaugeMetricFamily:
    """Open provider conflicts staff must resolve, per kind, every kind exported (at 0 too,
    so an alert has a series). One the platform is refunding money of (its refund step
    pending) needs nobody yet and is left out: the admin's "Open: the platform is refunding
    it"; once that refund fails for good, the conflict waits for staff and counts. The
    admin's filter "Open, waiting for staff" lists the same conflicts."""
    family = GaugeMetricFamily(
        "ordering_provider_conflicts_waiting",
        "Open payment provider conflicts waiting for staff to resolve them in the admin, per "
        "kind (not those whose money the platform is refunding by itself)",
        labels=["kind"],
    )
    counts = dict(
        waiting_for_staff(ProviderConflict.all_tenants.all())
        .order_by()
        .values_list("kind")
        .annotate(n=Count("pk"))
    )
    for kind in ProviderConflict.Kind.values:
        family.add_metric([kind], counts.get(kind, 0))
    return family


class WorkerIdCollector(Collector):
    """How many of the 128 order-ID worker ids a new process could still lease, per store."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        free = GaugeMetricFamily(
            "ordering_order_id_worker_ids_free",
            "Order-ID worker ids free to lease now, per lease store (none in an unreachable one)",
            labels=["store"],
        )
        capacity = GaugeMetricFamily(
            "ordering_order_id_worker_ids_capacity",
            "Order-ID worker ids each lease store hands out (128 in all)",
            labels=["store"],
        )
        for store, (n_free, n_all) in free_worker_ids().items():
            free.add_metric([store], n_free)
            capacity.add_metric([store], n_all)
        yield free
        yield capacity


@cache
def database_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(WorkerIdCollector())
    return registry
