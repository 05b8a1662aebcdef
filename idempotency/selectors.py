"""Reads over the engine's records and audits, for dashboards and staff tools.

Everything is keyed by the opaque ``tenant_key`` the scope resolver produced, so the host
application decides what a tenant is; nothing here knows about orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone

from idempotency.core.keys import ScopedKey
from idempotency.models import DuplicateAudit, IdempotencyRecord

Outcome = DuplicateAudit.Outcome


@dataclass(frozen=True)
class HourlyHits:
    """One hour of traffic through the engine for one tenant.

    ``first_executions`` counts records created in that hour (each is one request that ran);
    ``hits`` counts replays absorbed in that hour. The hit rate is the share of idempotent
    requests that were answered without running again.
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

    Two grouped queries (one per table), both on indexed timestamp columns.
    """
    end = (now or timezone.now()).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    hits = _per_hour(
        DuplicateAudit.objects.filter(
            tenant_key=tenant_key, outcome=Outcome.HIT, at__gte=start, at__lt=end
        ),
        "at",
    )
    firsts = _per_hour(
        IdempotencyRecord.objects.filter(
            tenant_key=tenant_key, created_at__gte=start, created_at__lt=end
        ),
        "created_at",
    )
    slots = (start + timedelta(hours=i) for i in range(hours))
    return [
        HourlyHits(hour=h, hits=hits.get(h, 0), first_executions=firsts.get(h, 0)) for h in slots
    ]


def _per_hour(queryset: QuerySet, field: str) -> dict[datetime, int]:
    rows = (
        queryset.annotate(hour=TruncHour(field, tzinfo=UTC))
        .values("hour")
        .annotate(n=Count("id"))
        .values_list("hour", "n")
    )
    return dict(rows)


def latest_audits(
    *, tenant_key: str, outcomes: Sequence[str], limit: int = 20
) -> QuerySet[DuplicateAudit]:
    """The newest audits of the given outcomes (HIT; or REUSED, CONFLICT, IN_PROGRESS)."""
    return DuplicateAudit.objects.filter(tenant_key=tenant_key, outcome__in=outcomes).order_by(
        "-at", "-id"
    )[:limit]


def outcome_totals(*, tenant_key: str, since: datetime) -> dict[str, int]:
    """How many audits of each outcome since ``since`` (every outcome present, zeros included)."""
    counts = dict(
        DuplicateAudit.objects.filter(tenant_key=tenant_key, at__gte=since)
        .values("outcome")
        .annotate(n=Count("id"))
        .values_list("outcome", "n")
    )
    return {outcome: counts.get(outcome, 0) for outcome in Outcome.values}


def has_committed_result(scoped: ScopedKey) -> bool:
    """Whether another request with this key has already committed its result.

    A view that lost a race to its own duplicate (database-only mode: both ran, the first
    committed) can tell from this that the engine is about to replay the winner's answer, and
    skip reporting its own refusal to the user.
    """
    return IdempotencyRecord.objects.filter(
        tenant_key=scoped.tenant,
        scope=scoped.scope,
        key=scoped.key,
        expires_at__gt=timezone.now(),
    ).exists()
