"""Reads over the engine's records and audits, for dashboards and staff tools.

Everything is keyed by the opaque ``tenant_key`` the scope resolver produced, so the host
application decides what a tenant is; nothing here knows about orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import QuerySet, Sum
from django.utils import timezone

from idempotency.core.keys import ScopedKey
from idempotency.models import MISS, DuplicateAudit, IdempotencyRecord, OutcomeCount

Outcome = DuplicateAudit.Outcome


@dataclass(frozen=True)
class HourlyHits:
    """One hour of traffic through the engine for one tenant, from the durable counters.

    ``first_executions`` counts requests that ran (MISS); ``hits`` counts replays absorbed in
    that hour. The hit rate is the share of idempotent requests that were answered without
    running again.
    """

    hour: datetime
    hits: int
    first_executions: int

    @property
    def total(self) -> int:
        return self.hits + self.first_executions

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.total if self.total else None


def hourly_hits(
    *, tenant_key: str, hours: int = 24, now: datetime | None = None
) -> list[HourlyHits]:
    """The last ``hours`` whole hours (oldest first, the current hour last), gaps as zeros.

    One grouped query over ``OutcomeCount`` (a row per tenant, endpoint, outcome and hour),
    which counts every outcome, first executions included, and outlives the records' expiry.
    """
    end = (now or timezone.now()).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    counts: dict[tuple[datetime, str], int] = {
        (hour, outcome): n
        for hour, outcome, n in OutcomeCount.objects.filter(
            tenant_key=tenant_key, outcome__in=[MISS, Outcome.HIT], hour__gte=start, hour__lt=end
        )
        .values("hour", "outcome")
        .annotate(n=Sum("count"))
        .values_list("hour", "outcome", "n")
    }
    slots = [(start + timedelta(hours=i)).astimezone(UTC) for i in range(hours)]
    return [
        HourlyHits(
            hour=h,
            hits=counts.get((h, Outcome.HIT), 0),
            first_executions=counts.get((h, MISS), 0),
        )
        for h in slots
    ]


def latest_audits(
    *, tenant_key: str, outcomes: Sequence[str], limit: int = 20
) -> QuerySet[DuplicateAudit]:
    """The newest audits of the given outcomes (HIT; or REUSED, CONFLICT, IN_PROGRESS).

    Each outcome's newest ``limit`` are read by themselves, through the index of a tenant's
    audits by outcome, newest first (``audit_tenant_outcome_at``), and the newest of those
    kept (one statement, a ``UNION ALL``): read for several outcomes at once, the database
    walked the index of every tenant's audits by time, dropping the others' rows, all of
    them for a tenant with none of these outcomes."""
    newest = [
        DuplicateAudit.objects.filter(tenant_key=tenant_key, outcome=outcome).order_by(
            "-at", "-id"
        )[:limit]
        for outcome in dict.fromkeys(outcomes)
    ]
    if len(newest) == 1:
        return newest[0]
    first, *others = newest
    return first.union(*others, all=True).order_by("-at", "-id")[:limit]


def outcome_totals(*, tenant_key: str, since: datetime) -> dict[str, int]:
    """How many requests ended with each outcome in the hours since ``since``'s hour, from the
    durable counters (every outcome present, MISS included, zeros included)."""
    hour = since.replace(minute=0, second=0, microsecond=0)
    counts = dict(
        OutcomeCount.objects.filter(tenant_key=tenant_key, hour__gte=hour)
        .values("outcome")
        .annotate(n=Sum("count"))
        .values_list("outcome", "n")
    )
    return {outcome: counts.get(outcome, 0) for outcome in (MISS, *Outcome.values)}


def has_committed_result(scoped: ScopedKey) -> bool:
    """Whether another request with this key has already committed its result.

    A view that lost a race to its own duplicate (database-only mode: both ran, the first
    committed) can tell from this that the engine is about to replay the winner's answer, and
    skip reporting its own refusal to the user.
    """
    return IdempotencyRecord.objects.filter(
        tenant_key=scoped.tenant,
        scope=scoped.scope,
        key=scoped.key_digest,
        expires_at__gt=timezone.now(),
    ).exists()
