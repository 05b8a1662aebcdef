"""Prometheus metrics of the engine (exposed by the host app's /metrics view).

prometheus-client is optional (the engine's ``metrics`` extra): without it every metric below
is a stand-in that records nothing, so the engine runs the same and simply reports nothing.

Under gunicorn the metrics of all workers are merged through prometheus-client's multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR``, set by the host's gunicorn configuration). The hit rate is
derived in Prometheus: HIT / all outcomes.
"""

from __future__ import annotations

from typing import Any

try:
    import prometheus_client
except ImportError:  # the "metrics" extra is not installed
    prometheus_client = None


class _Unrecorded:
    """What a metric is without prometheus-client: accepts every call, keeps nothing."""

    def labels(self, **_labels: str) -> _Unrecorded:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def set(self, value: float) -> None:
        pass


def _metric(kind: str, *args: Any, **kwargs: Any) -> Any:
    if prometheus_client is None:
        return _Unrecorded()
    return getattr(prometheus_client, kind)(*args, **kwargs)


outcomes = _metric(
    "Counter",
    "idempotency_outcomes_total",
    "Idempotency outcomes by tenant, endpoint and outcome",
    ["tenant", "endpoint", "outcome"],
)
redis_latency = _metric(
    "Histogram",
    "idempotency_redis_seconds",
    "Round-trip time of engine calls to Redis (claim, finish, release…), per node",
    ["node", "op"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5),
)
breaker_state = _metric(
    "Gauge",
    "idempotency_breaker_state",
    "Circuit breaker per Redis node: 0 closed, 1 half-open, 2 open (worst live process)",
    ["node"],
    # live processes only: gunicorn's child_exit drops a dead worker's value, which under
    # "max" stayed in the merge for good (a worker gone with its breaker open paged forever)
    multiprocess_mode="livemax",
)
audits_dropped = _metric(
    "Counter",
    "idempotency_audits_dropped_total",
    "Audit events lost before reaching the database: the in-process queue was full "
    "(queue_full), or the database refused them too often (write_failed)",
    ["reason"],
)
# Exported at 0 from the start: IdempotencyAuditsDropped fires on increase(), and a series
# born with its first drop has no earlier sample, so that drop would count as no increase.
for _reason in ("queue_full", "write_failed"):
    audits_dropped.labels(reason=_reason)
audits_drained = _metric(
    "Counter",
    "idempotency_audits_drained_total",
    "Audit events copied from the Redis streams into the database, by the processes that "
    "serve this endpoint (the drain usually runs in a Celery worker, which serves none: watch "
    "idempotency_audit_stream_oldest_seconds instead)",
)
rate_limited = _metric(
    "Counter",
    "idempotency_rate_limited_total",
    "Requests refused 429 by a limit, per tenant and the limit that refused them: a "
    "principal's own write rate (principal), the tenant's ceiling (ceiling) or the share of it "
    "a caller may fill (ceiling_share), tokens past the tenant's quota (token_quota), a "
    "principal's share of it (token_quota_principal) or the share of it a caller may fill "
    "(token_quota_share); the host app may count its own limits "
    "here too",
    ["tenant", "limit"],
)
# by BreakerState value (idempotency.stores.breaker), which this module sits below
_STATE_VALUE = {"closed": 0, "half_open": 1, "open": 2}


def breaker_changed(node: str, state: str) -> None:
    breaker_state.labels(node=node).set(_STATE_VALUE[str(state)])


def count(*, tenant: str, endpoint: str, outcome: str) -> None:
    outcomes.labels(tenant=tenant, endpoint=endpoint, outcome=outcome).inc()


def count_rate_limited(*, tenant: str, limit: str) -> None:
    """One request refused by a rate limit. A limit that anyone holding a public credential can
    spend (a tenant's ceiling share, a key's budget) denies the tenant's real users while it is
    spent: without a count of refusals nobody could see that happen."""
    rate_limited.labels(tenant=tenant, limit=limit).inc()
