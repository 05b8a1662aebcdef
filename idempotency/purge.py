"""Removing idempotency records: expired ones in bulk, single ones on staff request.

Safe to run at any time: only rows whose ``expires_at`` has passed are deleted, in small
batches, and a request that replaces an expired record concurrently is arbitrated by the
unique constraint either way. Expired Redis entries have already expired by their own TTL.
Purging a live record (staff, after a bad deploy stored a wrong answer) also deletes its Redis
entry and announces the key on pub/sub so every process drops it from its local cache.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from idempotency.core.conf import engine_setting
from idempotency.core.keys import redis_key_for
from idempotency.models import IdempotencyRecord
from idempotency.stores.nodes import node_for


def purge_expired(*, batch_size: int = 1000) -> int:
    """Delete every expired record; returns how many."""
    total = 0
    while True:
        with transaction.atomic():
            ids = list(
                IdempotencyRecord.objects.filter(expires_at__lte=timezone.now())
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                return total
            total += IdempotencyRecord.objects.filter(
                id__in=ids, expires_at__lte=timezone.now()
            ).delete()[0]


def purge_record(record: IdempotencyRecord) -> None:
    """Forget one key everywhere: database, Redis, and every process's local cache."""
    record.delete()
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(record.tenant_key, 1)
    key = redis_key_for(
        tenant=record.tenant_key, scope=record.scope, key=record.key, buckets=buckets
    )
    store = node_for(record.tenant_key, key=key)
    if store is not None:
        store.purge(key=key)
