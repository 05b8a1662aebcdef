"""Removing idempotency data: expired records and audits in bounded batches, single records on
staff request.

Safe to run at any time and from several processes: each batch picks at most
``PURGE_BATCH_SIZE`` ids of rows past their retention, then deletes those ids still past it,
in a transaction of its own — never one statement over the whole table, so a purge holds few
locks, writes a small WAL burst per batch and can stop between batches (``max_batches``). A
request that replaces an expired record concurrently is arbitrated by the unique constraint
either way. Expired Redis entries have already expired by their own TTL.

Retention: a record lives until its ``expires_at`` (set at write time from the tenant's
``RECORD_TTL_FOR_TENANT``, the endpoint's TTL or ``TTL_SECONDS``); an audit for its tenant's
number of days (``AUDIT_RETENTION_OVERRIDES``), else ``AUDIT_RETENTION_DAYS``, and so does an
hourly outcome count once its hour ended that long ago.

Purging a live record (staff, after a bad deploy stored a wrong answer) also deletes its Redis
entry and announces the key on pub/sub so every process drops it from its local cache.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from idempotency.core.conf import MAX_AUDIT_RETENTION_DAYS, engine_hook, engine_setting
from idempotency.core.keys import redis_key_from_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord, OutcomeCount
from idempotency.stores.nodes import local_cache, node_for

# Called inside each batch's transaction with the number of rows it deleted, so a tally kept
# by the caller commits (or rolls back) with the deletion itself.
OnBatch = Callable[[int], None]


def delete_in_batches(
    model: type[models.Model],
    expired: Callable[[datetime], Q],
    *,
    batch_size: int | None = None,
    max_batches: int | None = None,
    on_batch: OnBatch | None = None,
) -> int:
    """Delete the rows of ``model`` matching ``expired(now)``, at most ``batch_size`` per
    ``DELETE`` and ``max_batches`` batches (None: until none is left); returns how many."""
    return in_batches(
        model._default_manager,
        expired,
        apply=lambda rows: rows.delete()[0],
        batch_size=batch_size,
        max_batches=max_batches,
        on_batch=on_batch,
    )


def in_batches(
    manager: models.Manager,
    expired: Callable[[datetime], Q],
    *,
    apply: Callable[[models.QuerySet], int],
    batch_size: int | None = None,
    max_batches: int | None = None,
    on_batch: OnBatch | None = None,
) -> int:
    """``apply`` (a delete, or an update that clears columns) to the rows of ``manager``
    matching ``expired(now)``, at most ``batch_size`` rows and ``max_batches`` batches (None:
    until none is left), each batch in a transaction of its own; returns how many rows
    ``apply`` counted."""
    size = batch_size or engine_setting("PURGE_BATCH_SIZE")
    total = batches = 0
    while max_batches is None or batches < max_batches:
        with transaction.atomic():
            condition = expired(timezone.now())
            ids = list(manager.filter(condition).order_by("pk").values_list("pk", flat=True)[:size])
            if not ids:
                break
            done = apply(manager.filter(condition, pk__in=ids))
            if on_batch is not None:
                on_batch(done)
        total += done
        batches += 1
    return total


def expired_records(now: datetime) -> Q:
    return Q(expires_at__lte=now)


def expired_audits(now: datetime) -> Q:
    """Audits older than their tenant's retention: the default cut-off for every tenant
    without its own, each override's cut-off for its tenant."""
    return _past_audit_retention(now, "at")


def expired_outcome_counts(now: datetime) -> Q:
    """Hourly outcome counts whose whole hour ended before their tenant's audit retention.

    Every request adds to one (anyone's, a guest's of a public key included), a row per tenant,
    endpoint, outcome and hour; the reports read the last day. Kept for ever, the table grew
    by the hour for as long as a tenant lived; they go with the audits they summarise."""
    return _past_audit_retention(now - timedelta(hours=1), "hour")


def _past_audit_retention(now: datetime, field: str) -> Q:
    overrides_hook = engine_hook("AUDIT_RETENTION_OVERRIDES")
    overrides: dict[str, int] = overrides_hook() if overrides_hook else {}
    for tenant_key, days in overrides.items():
        _check_override(tenant_key, days)
    default = now - timedelta(days=engine_setting("AUDIT_RETENTION_DAYS"))
    condition = Q(**{f"{field}__lt": default}) & ~Q(tenant_key__in=list(overrides))
    for tenant_key, days in overrides.items():
        condition |= Q(tenant_key=tenant_key, **{f"{field}__lt": now - timedelta(days=days)})
    return condition


def _check_override(tenant_key: str, days: Any) -> None:
    """A ``ValueError`` naming the hook and the tenant, before anything is deleted, for days
    the purge cannot apply: 0 or fewer put the tenant's cut-off at or after now, and every one
    of its audits was deleted at once; past ``MAX_AUDIT_RETENTION_DAYS`` the cut-off fell before
    year 1 and every purge stopped on ``OverflowError``."""
    if (
        isinstance(days, bool)
        or not isinstance(days, int | float)
        or not 0 < days <= MAX_AUDIT_RETENTION_DAYS  # NaN too
    ):
        raise ValueError(
            f'IDEMPOTENCY["AUDIT_RETENTION_OVERRIDES"] gives tenant {tenant_key!r} {days!r} '
            f"days: it must be a number of days over 0, up to {MAX_AUDIT_RETENTION_DAYS}"
        )


def purge_expired(
    *,
    batch_size: int | None = None,
    max_batches: int | None = None,
    on_batch: OnBatch | None = None,
) -> int:
    """Delete expired idempotency records; returns how many."""
    return delete_in_batches(
        IdempotencyRecord,
        expired_records,
        batch_size=batch_size,
        max_batches=max_batches,
        on_batch=on_batch,
    )


def purge_expired_audits(
    *,
    batch_size: int | None = None,
    max_batches: int | None = None,
    on_batch: OnBatch | None = None,
) -> int:
    """Delete duplicate-hit audits past their tenant's retention; returns how many."""
    return delete_in_batches(
        DuplicateAudit,
        expired_audits,
        batch_size=batch_size,
        max_batches=max_batches,
        on_batch=on_batch,
    )


def purge_expired_outcome_counts(
    *,
    batch_size: int | None = None,
    max_batches: int | None = None,
    on_batch: OnBatch | None = None,
) -> int:
    """Delete hourly outcome counts past their tenant's audit retention; returns how many."""
    return delete_in_batches(
        OutcomeCount,
        expired_outcome_counts,
        batch_size=batch_size,
        max_batches=max_batches,
        on_batch=on_batch,
    )


def purge_record(record: IdempotencyRecord) -> None:
    """Forget one key everywhere: database, Redis, and every process's local cache."""
    record.delete()
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(record.tenant_key, 1)
    key = redis_key_from_digest(
        tenant=record.tenant_key, scope=record.scope, digest=record.key, buckets=buckets
    )
    local_cache().invalidate(key)  # at once here, with or without a listener (database-only)
    store = node_for(record.tenant_key, key=key)
    if store is not None:
        store.purge(key=key)
