"""Offboarding a tenant: suspend it, hand it its archive, then remove every trace of it.

A :class:`~ordering.models.TenantOffboarding` job walks these phases, persisting its progress
after every bounded step, so it can be stopped anywhere (a crash, a deploy, a killed worker)
and started again to finish:

1. **suspend**: once the tenant's writes in flight have committed, the tenant is marked
   ``offboarding`` (its API answers 403 ``TENANT_SUSPENDED``, its dashboard is closed, and
   PostgreSQL refuses any later write of its rows, :mod:`tenants.write_fence`), its API keys
   revoked and its diner sessions ended (401 once revoked), and its payments a provider may
   still capture late kept by the platform (:mod:`ordering.payments.departed`), all in one
   transaction, so nothing of it is written while the rest runs; while its money still
   moves, it is only ``suspended`` and the job waits here (:func:`_suspend`);
2. **export**: the archive (:mod:`ordering.privacy.archive`) is written to the job's path;
3. **engine**: the idempotency records (each with its Redis entry, announced to every
   process's local cache) and audits, and any other engine table keyed by the tenant, one
   batch per step;
4. **redis**: every key left under the tenant's hash tag, ``SCAN``-ned page by page on every
   node or cluster primary (tokens, quota ledgers, rate counters, claims in flight);
5. **tables**: the tenant's rows, table by table in :func:`~ordering.privacy.tenant_tables.
   deletion_order`, one batch per step; first, if the archive no longer holds every row (it
   is gone, or a request that passed authentication before the suspension wrote since), the
   job goes back to **export**;
6. **tenant**: once ``OFFBOARDING_DRAIN_SECONDS`` have passed since the suspension (no
   request authenticated before it is still running), the engine's rows of the tenant
   written since the engine phase (counts and audits a server process flushed late) and its
   Redis keys stored since the Redis phase (a late request's tokens), then the tenant row
   itself (its memberships go with it), and the job is done.

Each database step runs in one transaction with the job's row locked (``SELECT … FOR
UPDATE``): what it deleted and the progress it recorded commit together, and two runners of
the same job (a Celery message delivered twice) take turns instead of racing. Every step
deletes what is still there, so repeating one after a crash is harmless.
"""

from __future__ import annotations

import time
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, Model, OuterRef, Q
from django.utils import timezone

from idempotency import erasure
from idempotency.models import IdempotencyRecord
from idempotency.stores.audit_stream import drain_audits
from idempotency.stores.nodes import REDIS_UNAVAILABLE
from ordering.errors import OrderingError
from ordering.models import (
    Compensation,
    DeadLetter,
    Order,
    OrderStatus,
    Payment,
    ProviderConflict,
    TenantOffboarding,
)
from ordering.models.orders import REFUNDABLE
from ordering.payments.departed import record_departed_payments
from ordering.privacy.archive import archive_holds_all, export_tenant, partial_archive
from ordering.privacy.tenant_tables import deletion_order, engine_tables, rows_of
from ordering.services.lifecycle import cancel_order
from tenants import credential_cache, session_state, write_fence
from tenants.models import ApiClient, DinerSession, Tenant

Phase = TenantOffboarding.Phase


class OffboardingRefused(Exception):
    """The request cannot start (e.g. another job of the tenant writes elsewhere)."""


def start_offboarding(
    *, tenant: Tenant, export_path: Path, requested_by: str, batch_size: int = 500
) -> TenantOffboarding:
    """The tenant's open job, or a new one. An open job takes a new archive path only until
    its archive is written (e.g. after the first path could not be written); after that,
    another path is refused rather than silently ignored."""
    job = TenantOffboarding.objects.filter(tenant_ref=tenant.pk).exclude(phase=Phase.DONE).first()
    if job is not None and Path(job.export_path) == export_path:
        return job
    _refuse_another_jobs_archive(export_path, tenant=tenant)
    if job is not None:
        # On condition that the archive is still unwritten, decided by the row: an export
        # running now holds its lock, and once it commits this matches nothing. A plain save
        # waited for that lock and then recorded the new path beside the archive written at
        # the old one, and the job, kept as the record of the offboarding, named a file that
        # was never written.
        if TenantOffboarding.objects.filter(
            pk=job.pk, phase__in=[Phase.SUSPEND, Phase.EXPORT]
        ).update(export_path=str(export_path), updated_at=timezone.now()):
            # No export writes to the old path now (one running holds the row the update
            # waited for): what a killed one left there holds diners' data, and no later run
            # of this job would clear it.
            with suppress(NotADirectoryError):  # a path that could not be written at all
                partial_archive(Path(job.export_path)).unlink(missing_ok=True)
            job.refresh_from_db()
            return job
        job.refresh_from_db()
        if Path(job.export_path) == export_path:
            return job
        raise OffboardingRefused(
            f"offboarding {job.pk} of {tenant.slug} is under way and exported to "
            f"{job.export_path}; run it again with that path"
        )
    try:
        with transaction.atomic():
            return TenantOffboarding.objects.create(
                tenant_ref=tenant.pk,
                tenant_slug=tenant.slug,
                export_path=str(export_path),
                batch_size=batch_size,
                requested_by=requested_by[:200],
            )
    except IntegrityError:  # a concurrent request opened it first (one open job per tenant)
        return start_offboarding(
            tenant=tenant, export_path=export_path, requested_by=requested_by, batch_size=batch_size
        )


def _refuse_another_jobs_archive(export_path: Path, *, tenant: Tenant) -> None:
    """Refuse a path another offboarding wrote (or writes) its archive to: exporting there
    would replace an archive that may not be handed over yet. Run again after its tenant's
    slug was given to a new restaurant, the same command offboarded the newcomer over it.
    The tenant's own open job is not another (a concurrent request may just have opened it)."""
    own_open_job = Q(tenant_ref=tenant.pk) & ~Q(phase=Phase.DONE)
    other = (
        TenantOffboarding.objects.filter(export_path=str(export_path)).exclude(own_open_job).first()
    )
    if other is not None:
        raise OffboardingRefused(
            f"{export_path} is the archive of offboarding {other.pk} of {other.tenant_slug}; "
            "choose another path"
        )


def run_offboarding(job_id: int, *, max_steps: int | None = None) -> TenantOffboarding:
    """Run the job's steps until it is done (or ``max_steps`` steps have run)."""
    steps = 0
    while max_steps is None or steps < max_steps:
        try:
            job = step(job_id)
        except Exception as exc:  # keep why it stopped on the job for staff, then fail loudly
            why = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, REDIS_UNAVAILABLE):  # an outage: the beat's sweep resumes it
                why = f"{WAITING_FOR_REDIS} ({why}); run the offboarding again later"
            TenantOffboarding.objects.filter(pk=job_id).update(
                last_error=why[:2000], updated_at=timezone.now()
            )
            raise
        steps += 1
        if job.is_done or waits_for_money(job):
            return job
    return TenantOffboarding.objects.get(pk=job_id)


def stalled_jobs(*, limit: int = 100) -> list[int]:
    """Open jobs nothing has moved for ``OFFBOARDING_STALLED_AFTER_SECONDS`` that stopped for
    no error (under way, or waiting for the restaurant's money) or because Redis did not
    answer: the message that was to run their next steps was lost, or the step it ran met the
    outage that lost it (Redis restarted, failed over, or frozen past its timeout). Every step
    saves the job, so a job whose messages still run is never this old; one stopped by another
    error is left for staff, who see why on the job."""
    quiet_since = timezone.now() - timedelta(seconds=settings.OFFBOARDING_STALLED_AFTER_SECONDS)
    stalled = (
        TenantOffboarding.objects.exclude(phase=Phase.DONE)
        .filter(updated_at__lt=quiet_since)
        .filter(
            Q(last_error="")
            | Q(last_error__startswith=WAITING_FOR_MONEY)
            | Q(last_error__startswith=WAITING_FOR_REDIS)
        )
        .order_by("updated_at")
    )
    return list(stalled.values_list("pk", flat=True)[:limit])


def waits_for_money(job: TenantOffboarding) -> bool:
    """The suspension ran and found the tenant's money still moving: nothing more to do now."""
    return job.phase == Phase.SUSPEND and job.last_error.startswith(WAITING_FOR_MONEY)


def step(job_id: int) -> TenantOffboarding:
    """One bounded unit of work of the job, committed with the progress it made."""
    job = TenantOffboarding.objects.get(pk=job_id)
    if job.phase == Phase.REDIS:
        return _redis_keys(job)  # not a database transaction: it records progress per page
    if job.phase == Phase.TENANT:
        _wait_for_requests_in_flight(job)  # outside the transaction: no lock held meanwhile
    with transaction.atomic():
        job = TenantOffboarding.objects.select_for_update().get(pk=job_id)
        if job.is_done or job.phase == Phase.REDIS:  # another runner got here first
            return job
        # a step that goes through is past why a run stopped (the suspension says again what
        # it waits for): kept, the admin showed the job as stopped on it, and the beat's sweep
        # never resumed the job once a later message of it was lost
        job.last_error = ""
        _PHASES[job.phase](job)
        job.save()
    return job


def _count(job: TenantOffboarding, what: str, n: int) -> None:
    job.counts[what] = job.counts.get(what, 0) + n
    job.batches += 1


def _suspend(job: TenantOffboarding) -> None:
    """Close the tenant's tables once its writes in flight have committed (the fence waits for
    them), revoke its credentials, and mark it ``offboarding``: from this commit on, any write
    of a row of it is refused, so the export that follows holds every row the tables phase
    deletes, as it was.

    Unless its money is still moving (:func:`money_in_flight`): the fence would refuse the
    provider's callback that settles a payment and the saga's refund of a cancel, and the
    diner's money would leave with the restaurant's rows. Then the tenant is only
    ``suspended`` (no request authenticates, so no new order, pay or cancel starts, while the
    callbacks and workers that settle the rest still write), the job stays in this phase with
    what it waits for as its ``last_error``, and a later run closes the tables once nothing
    moves."""
    now = timezone.now()
    _lock_credentials(job.tenant_ref)
    write_fence.close(job.tenant_ref)
    ApiClient.objects.filter(tenant_id=job.tenant_ref, revoked_at__isnull=True).update(
        revoked_at=now
    )
    DinerSession.objects.filter(tenant_id=job.tenant_ref, revoked_at__isnull=True).update(
        revoked_at=now
    )
    # Bulk updates send no signals: tell every process's credential cache at commit, so no
    # cached key or session of the tenant outlives the suspension.
    credential_cache.announce(credential_cache.EVERYTHING)
    transaction.on_commit(session_state.clear)
    moving = money_in_flight(job.tenant_ref)
    if moving:
        Tenant.objects.filter(pk=job.tenant_ref).update(status=Tenant.Status.SUSPENDED)
        job.last_error = f"{WAITING_FOR_MONEY}: {moving}; run the offboarding again later"
        return
    # A provider may still report a capture of a payment voided or declined: kept by the
    # platform, neither fenced nor deleted with the tenant, so the webhook refunds it.
    record_departed_payments(tenant_id=job.tenant_ref, tenant_slug=job.tenant_slug)
    # last: the fence refuses the tenant's writes from here on, the revocations above included
    Tenant.objects.filter(pk=job.tenant_ref).update(status=Tenant.Status.OFFBOARDING)
    job.suspended_at = now
    job.last_error = ""
    job.phase = Phase.EXPORT


WAITING_FOR_MONEY = "waiting for the restaurant's money in flight to settle"
WAITING_FOR_REDIS = "waiting for Redis to answer"


def money_in_flight(tenant_id: int) -> str:
    """What of the tenant's money still moves, in words ("" when nothing does): payments the
    provider has not settled, cancels whose saga has not ended, refunds not yet made,
    provider conflicts staff have not resolved, and paid orders not delivered
    (:func:`_paid_not_delivered`). Read under the tenant's row lock, so nothing of it starts
    meanwhile."""
    counts = {
        "payments awaiting the provider": Payment.all_tenants.filter(
            tenant_id=tenant_id, status=Payment.Status.PENDING
        ).count(),
        "cancels in progress": Order.all_tenants.filter(
            tenant_id=tenant_id, status=OrderStatus.CANCELLING
        )
        .exclude(_settled_by_staff())
        .count(),
        "compensations pending": Compensation.all_tenants.filter(
            tenant_id=tenant_id, status=Compensation.Status.PENDING
        ).count(),
        # money the provider reported that staff have yet to settle: an amount reported
        # wrong, or a capture the platform's refund of failed for good; deleted, nothing
        # would tell staff the diner's money is still to go back
        "payments under review by staff": ProviderConflict.all_tenants.filter(
            tenant_id=tenant_id, resolved=False
        ).count(),
    }
    moving = [f"{n} {what}" for what, n in counts.items() if n]
    paid = _paid_not_delivered(tenant_id)
    if paid:
        moving.append(paid)
    return ", ".join(moving)


# an order in one of these holds its diner's money for food not delivered yet
PAID_NOT_DELIVERED = (*REFUNDABLE, OrderStatus.DELIVERING)
_NAMED_ORDERS = 20


def _paid_not_delivered(tenant_id: int) -> str:
    """The tenant's paid orders not delivered, in words with their ids and what the operator
    may do ("" when there are none). Such an order holds its diner's money: deleted with the
    restaurant's rows, the diner had neither the food nor a refund. Staff complete it once
    delivered, or cancel it, which refunds the diner through the cancel saga (the admin's
    order actions; ``offboard_tenant --cancel-paid-orders`` cancels every one of them)."""
    ids = list(
        Order.all_tenants.filter(tenant_id=tenant_id, status__in=PAID_NOT_DELIVERED)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not ids:
        return ""
    named = ", ".join(map(str, ids[:_NAMED_ORDERS])) + (", ..." if len(ids) > _NAMED_ORDERS else "")
    return (
        f"{len(ids)} paid orders not delivered ({named}: complete them once delivered, or "
        "cancel them to refund their diners; --cancel-paid-orders cancels them all)"
    )


def cancel_paid_orders(job: TenantOffboarding) -> list[int]:
    """Cancel every paid order of the job's suspended tenant that a cancel takes (not one on
    its way to the diner), each refunded through the cancel saga; the ids cancelled. Only
    while the job waits for the money (the tenant suspended: no new order is placed or paid
    meanwhile). Each cancel is the order's conditional move, so an order a concurrent run (or
    staff) cancelled or moved first is left as it is: no diner is refunded twice."""
    tenant = Tenant.objects.filter(pk=job.tenant_ref, status=Tenant.Status.SUSPENDED).first()
    if tenant is None or not waits_for_money(job):
        return []
    actor = f"offboarding:{job.requested_by}"[:200]  # the transition log's column
    cancelled = []
    for order_id in (
        Order.all_tenants.filter(tenant_id=tenant.pk, status__in=REFUNDABLE)
        .order_by("pk")
        .values_list("pk", flat=True)
    ):
        try:
            cancel_order(tenant=tenant, order_id=order_id, actor=actor)
        except OrderingError:  # moved or cancelled meanwhile
            continue
        cancelled.append(order_id)
    return cancelled


def _settled_by_staff() -> Q:
    """A CANCELLING order whose saga stopped at a step that failed for good and whose letter
    staff closed without a requeue (discarded: they settled it by hand). It stays CANCELLING
    for good and nothing runs it again, so no money of it moves: counted as a cancel in
    progress, it held its restaurant's offboarding back for ever, and the only way on, a
    requeue, would refund again what staff had refunded."""
    failed_step = Compensation.all_tenants.filter(
        order=OuterRef("pk"), status=Compensation.Status.FAILED
    )
    open_letter = DeadLetter.objects.filter(order=OuterRef("pk"), state=DeadLetter.State.OPEN)
    return Q(Exists(failed_step)) & ~Q(Exists(open_letter))


def _lock_credentials(tenant_id: int) -> None:
    """Lock the tenant's live API keys and diner sessions before its row. A request writes its
    key's row (``last_used_at``, its lock taken first) and then, in the fence's trigger, waits
    for the tenant's row; a suspension that closed the tenant's row first and then revoked that
    key waited for the request in turn, and PostgreSQL ended one of them as a deadlock (the
    step failed, or the request answered 500). Taken in this order, the request's write goes
    through (or waits for the suspension, holding nothing it needs)."""
    for model in (ApiClient, DinerSession):
        list(
            model.objects.select_for_update()
            .filter(tenant_id=tenant_id, revoked_at__isnull=True)
            .order_by("pk")
            .values_list("pk", flat=True)
        )


def _export(job: TenantOffboarding) -> None:
    tenant = Tenant.objects.get(pk=job.tenant_ref)
    job.export_sha256 = export_tenant(tenant=tenant, path=Path(job.export_path))
    job.phase = Phase.ENGINE


def _engine(job: TenantOffboarding) -> None:
    if not _engine_batch(job):
        job.phase = Phase.REDIS


def _engine_batch(job: TenantOffboarding) -> bool:
    """One batch of the engine's rows of the tenant: records (each with its Redis entry and a
    cache announcement) first, then the other engine tables; False if none is left."""
    tenant_key = str(job.tenant_ref)
    records = IdempotencyRecord.objects.filter(tenant_key=tenant_key)
    n = erasure.forget_records(records, batch=job.batch_size, max_batches=1)
    if n:
        _count(job, IdempotencyRecord._meta.label, n)
        return True
    # The tenant is suspended: audits of its last requests may still wait in a Redis stream,
    # and would land after the delete below unless copied first.
    drain_audits()
    return _one_batch(job, [(m, Q(tenant_key=tenant_key)) for m in engine_tables()])


def _one_batch(job: TenantOffboarding, tables: list[tuple[type[Model], Q]]) -> bool:
    """Delete one batch from the first of ``tables`` that still has rows; False if none has."""
    for model, rows in tables:
        n = erasure.delete_in_batches(
            model._base_manager.filter(rows), batch=job.batch_size, max_batches=1
        )
        if n:
            _count(job, model._meta.label, n)
            return True
    return False


def _redis_keys(job: TenantOffboarding) -> TenantOffboarding:
    """SCAN and delete page by page, each page's count recorded under the job's lock; the
    phase moves on only if no other runner moved it further meanwhile."""
    for deleted in erasure.forget_tenant_keys_by_page(str(job.tenant_ref), batch=job.batch_size):
        with transaction.atomic():
            locked = TenantOffboarding.objects.select_for_update().get(pk=job.pk)
            _count(locked, "redis_keys", deleted)
            locked.save(update_fields=["counts", "batches", "updated_at"])
    TenantOffboarding.objects.filter(pk=job.pk, phase=Phase.REDIS).update(
        phase=Phase.TABLES, last_error="", updated_at=timezone.now()
    )
    return TenantOffboarding.objects.get(pk=job.pk)


def _tables(job: TenantOffboarding) -> None:
    if not _tables_started(job) and not archive_holds_all(
        tenant=Tenant.objects.get(pk=job.tenant_ref),
        path=Path(job.export_path),
        sha256=job.export_sha256,
    ):
        # Rows written since the archive (a request authenticated before the suspension
        # finished after the export) were deleted without ever being exported: export again,
        # and go through the engine and Redis again for what those requests stored.
        job.phase = Phase.EXPORT
        return
    if not _tables_started(job):
        # (again: a job suspended by a release that kept none had none kept)
        record_departed_payments(tenant_id=job.tenant_ref, tenant_slug=job.tenant_slug)
    tables = [(model, rows_of(model, job.tenant_ref)) for model in deletion_order()]
    if not _one_batch(job, tables):
        job.phase = Phase.TENANT


def _tables_started(job: TenantOffboarding) -> bool:
    """Whether a batch of the tenant's tables was deleted already (the archive is final)."""
    return any(model._meta.label in job.counts for model in deletion_order())


def _wait_for_requests_in_flight(job: TenantOffboarding) -> None:
    """Sleep until ``OFFBOARDING_DRAIN_SECONDS`` have passed since the suspension, when no
    request authenticated before it can still be running (nor hold an audit unwritten)."""
    since = job.suspended_at or job.created_at
    drained = since + timedelta(seconds=settings.OFFBOARDING_DRAIN_SECONDS)
    left = (drained - timezone.now()).total_seconds()
    if left > 0:
        time.sleep(left)


def _tenant(job: TenantOffboarding) -> None:
    """The engine's rows and Redis keys of the tenant once more, then the tenant row. A
    request authenticated before the suspension may have stored in Redis after the Redis
    phase (its diner's tokens: no table fences Redis), and a server process counts first
    executions in memory and writes them every ``AUDIT_FLUSH_SECONDS`` (and keeps an audit
    the stream refused the same way): rows and keys of the tenant nothing removed. Runs once
    those requests have ended (:func:`_wait_for_requests_in_flight`)."""
    if _engine_batch(job):
        return
    for deleted in erasure.forget_tenant_keys_by_page(str(job.tenant_ref), batch=job.batch_size):
        _count(job, "redis_keys", deleted)
    Tenant.objects.filter(pk=job.tenant_ref).delete()
    job.phase = Phase.DONE
    job.finished_at = timezone.now()
    job.last_error = ""


_PHASES = {
    Phase.SUSPEND: _suspend,
    Phase.EXPORT: _export,
    Phase.ENGINE: _engine,
    Phase.TABLES: _tables,
    Phase.TENANT: _tenant,
}
