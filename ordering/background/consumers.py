"""Consumers of outbox events: each event's effect happens once, however often it is delivered.

The outbox publishes at least once (after commit, and again by the sweeper if that was lost) and
the broker delivers at least once (late acks, redelivery after a crash), so any event may arrive
twice, even at the same time. A consumer records the event in the inbox
(:mod:`ordering.background.inbox`) in the same transaction as its effect, so exactly one
delivery commits both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from django.db import transaction

from ordering.background.inbox import record_processed
from ordering.background.saga import SagaOutcome, run_cancel_saga
from ordering.background.sales import count_sale
from ordering.models import EventType, OutboxEvent

logger = logging.getLogger(__name__)


class ConsumeResult(StrEnum):
    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    MISSING = "missing"
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"
    # its restaurant's rows are fenced for the offboarding, which deletes the event too
    TENANT_LEAVING = "tenant_leaving"


def handle_event(*, event_id: int) -> ConsumeResult:
    """Run the consumer of outbox event ``event_id``.

    May raise ``ordering.background.steps.RetryLater`` (the task retries it with backoff).
    """
    event = OutboxEvent.all_tenants.select_related("tenant").filter(pk=event_id).first()
    if event is None:
        # Another database's event (a broker shared across environments) or one deleted by
        # staff: nothing to do, and retrying would not change that.
        logger.warning("outbox event %s does not exist; message dropped", event_id)
        return ConsumeResult.MISSING
    return HANDLERS[event.event_type](event)


def on_order_paid(event: OutboxEvent) -> ConsumeResult:
    """Count the sale in the tenant's daily sales, once per paid order."""
    with transaction.atomic():
        if not record_processed(event):
            return ConsumeResult.DUPLICATE
        order = event.order
        count_sale(
            tenant=event.tenant,
            at=event.created_at,
            currency=order.currency,
            amount=order.total,
        )
    return ConsumeResult.PROCESSED


def on_cancel_requested(event: OutboxEvent) -> ConsumeResult:
    outcome = run_cancel_saga(event=event)
    return {
        SagaOutcome.COMPLETED: ConsumeResult.PROCESSED,
        SagaOutcome.ALREADY_DONE: ConsumeResult.DUPLICATE,
        SagaOutcome.DEAD_LETTERED: ConsumeResult.DEAD_LETTERED,
        SagaOutcome.NOT_CANCELLING: ConsumeResult.SKIPPED,
    }[outcome]


HANDLERS: dict[str, Callable[[OutboxEvent], ConsumeResult]] = {
    EventType.ORDER_PAID: on_order_paid,
    EventType.CANCEL_REQUESTED: on_cancel_requested,
}
