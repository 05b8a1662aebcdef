"""The consumers' inbox: which outbox events already had their effect.

A consumer writes a ``ProcessedEvent`` row in the same transaction as its effect;
``unique(tenant, order, event_type, version)`` lets exactly one delivery commit both, and any
other finds the row and changes nothing (it only counts itself as a duplicate).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from ordering.models import OutboxEvent, ProcessedEvent


def record_processed(event: OutboxEvent) -> bool:
    """Mark ``event`` processed inside the caller's transaction: True the first time; False
    (counting a duplicate) if it already was — the caller must then apply no effect."""
    key = {
        "tenant_id": event.tenant_id,
        "order_id": event.order_id,
        "event_type": event.event_type,
        "version": event.version,
    }
    try:
        with transaction.atomic():
            ProcessedEvent.all_tenants.create(event=event, **key)
    except IntegrityError:
        ProcessedEvent.all_tenants.filter(**key).update(duplicates=F("duplicates") + 1)
        return False
    return True


def is_processed(event: OutboxEvent) -> bool:
    return ProcessedEvent.all_tenants.filter(
        tenant_id=event.tenant_id,
        order_id=event.order_id,
        event_type=event.event_type,
        version=event.version,
    ).exists()
