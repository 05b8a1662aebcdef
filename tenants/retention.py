"""The retention purge: what has outlived its retention is deleted, in bounded batches.

Eight kinds of rows, each with its own clock, and the kinds other apps register
(:func:`register_kind`; the ordering app clears what diners wrote on long-finished orders
and deletes guests' orders cancelled before any payment):

- ``idempotency_records``: past their ``expires_at`` (the tenant's record TTL at write time);
- ``duplicate_audits``: older than the tenant's audit retention (default 30 days);
- ``outcome_counts``: the engine's hourly counts of outcomes per endpoint, once their hour
  ended as long ago (the Duplicates page reads the last 24 hours);
- ``diner_sessions``: past their ``expires_at``. An expired token is refused by its signed
  expiry before any lookup, so nothing reads the row again;
- ``login_attempts``: the login throttle's failed attempts (django-axes: the name typed, which
  may be a mistyped password, the address and user agent) once older than the lockout's
  cool-off, when they no longer lock anything;
- ``login_records`` and ``login_failures``: the logins it logged, successful or failed (name,
  address, user agent), older than ``LOGIN_RECORD_RETENTION_DAYS`` (30);
- ``browser_sessions``: dashboard and admin sessions past their expiry (Django never deletes
  them by itself; one may still hold a newly issued API key that was never shown).

Celery beat runs :func:`purge_expired_data` every ``RETENTION_PURGE_SECONDS``
(``tenants.tasks``); each kind is deleted ``PURGE_BATCH_SIZE`` rows per ``DELETE``, at most
``RETENTION_PURGE_MAX_BATCHES`` per run, so one run holds few locks for a short time and what
it leaves is taken by the next. Each batch adds its count to :class:`RetentionTally` in its own
transaction; :mod:`tenants.retention_metrics` exports the tallies and the rows overdue.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db.models import F, Q
from django.utils import timezone

from idempotency.core.conf import engine_setting
from idempotency.models import DuplicateAudit, IdempotencyRecord, OutcomeCount
from idempotency.purge import (
    OnBatch,
    delete_in_batches,
    expired_audits,
    expired_outcome_counts,
    expired_records,
)
from tenants.models import DinerSession, RetentionTally


def expired_diner_sessions(now: datetime) -> Q:
    return Q(expires_at__lte=now)


def expired_browser_sessions(now: datetime) -> Q:
    return Q(expire_date__lt=now)


def expired_login_attempts(now: datetime) -> Q:
    return Q(attempt_time__lt=now - settings.AXES_COOLOFF_TIME)


def expired_login_records(now: datetime) -> Q:
    return Q(attempt_time__lt=now - timedelta(days=settings.LOGIN_RECORD_RETENTION_DAYS))


# kind -> (model, condition at a given time): the purge and the overdue gauge share them
KINDS: dict[str, tuple[type, Callable[[datetime], Q]]] = {
    "idempotency_records": (IdempotencyRecord, expired_records),
    "duplicate_audits": (DuplicateAudit, expired_audits),
    "outcome_counts": (OutcomeCount, expired_outcome_counts),
    "diner_sessions": (DinerSession, expired_diner_sessions),
    "login_attempts": (AccessAttempt, expired_login_attempts),
    "login_records": (AccessLog, expired_login_records),
    "login_failures": (AccessFailureLog, expired_login_records),
    "browser_sessions": (Session, expired_browser_sessions),
}


# kind -> how its rows are purged, for a kind that is not deleted (delete_in_batches's call)
PURGES: dict[str, Callable[..., int]] = {}


def register_kind(
    kind: str, model: type, expired: Callable[[datetime], Q], purge: Callable[..., int]
) -> None:
    """Add a kind of another app to the purge and its overdue gauge: ``purge(model, expired,
    *, max_batches, on_batch)`` purges the rows matching ``expired(now)`` in batches, as
    :func:`idempotency.purge.delete_in_batches` does, and returns how many it purged. Called
    from an app's ``ready()``: this app knows nothing of the others."""
    KINDS[kind] = (model, expired)
    PURGES[kind] = purge


def purge_expired_data(*, max_batches: int | None = None) -> dict[str, int]:
    """Purge every kind (at most ``max_batches`` batches each, default
    ``RETENTION_PURGE_MAX_BATCHES``); rows purged per kind."""
    limit = max_batches or settings.RETENTION_PURGE_MAX_BATCHES
    return {
        kind: PURGES.get(kind, delete_in_batches)(
            model, expired, max_batches=limit, on_batch=_tally(kind)
        )
        for kind, (model, expired) in KINDS.items()
    }


def overdue_rows() -> dict[str, int]:
    """Rows past their retention and not purged yet, per kind (one COUNT each), counted up to
    :func:`overdue_count_limit`: /metrics reads this on every scrape, and an exact COUNT read
    every overdue row, so the further the purge fell behind, the longer each scrape took (a
    second for 3 million records), until scrapes timed out and every alert lost its series."""
    now = timezone.now()
    limit = overdue_count_limit()
    return {
        kind: model._default_manager.filter(expired(now)).order_by()[:limit].count()
        for kind, (model, expired) in KINDS.items()
    }


def overdue_count_limit() -> int:
    """Twice the rows a run purges of a kind (``PURGE_BATCH_SIZE`` x
    ``RETENTION_PURGE_MAX_BATCHES``, 200,000 by default): RetentionPurgeFallingBehind compares
    the overdue rows with one run's capacity, and a count past twice that changes nothing."""
    return 2 * engine_setting("PURGE_BATCH_SIZE") * settings.RETENTION_PURGE_MAX_BATCHES


def _tally(kind: str) -> OnBatch:
    def add(rows: int) -> None:
        RetentionTally.objects.get_or_create(kind=kind)
        RetentionTally.objects.filter(kind=kind).update(
            rows_purged=F("rows_purged") + rows, last_purge_at=timezone.now()
        )

    return add
