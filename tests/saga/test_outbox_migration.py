"""Migration 0012: outbox rows published before consumption was recorded count as consumed
when a consumer processed them or they were published over an hour ago; the others may be sent
once more (the consumers' inbox absorbs it). Migration 0013: rows waiting for a consumer get
the time the sweeper sends them again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support.migrations import migrate_to

BEFORE = [("ordering", "0011_conflict_paid_twice")]
AFTER = [("ordering", "0012_outbox_consumed")]


@pytest.mark.django_db(transaction=True)
def test_earlier_rows_count_as_consumed_when_processed_or_old(back_to_latest: None) -> None:
    old = migrate_to(BEFORE)
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="mig", name="Mig")
    order = old.get_model("ordering", "Order")._base_manager.create(
        id=1, tenant=tenant, subtotal=0, total=0, number=1, business_day=timezone.now().date()
    )
    events = old.get_model("ordering", "OutboxEvent")._base_manager
    now = timezone.now()

    def event(version: int, published_at):
        return events.create(
            tenant=tenant,
            order=order,
            event_type="order.paid",
            version=version,
            published_at=published_at,
        )

    processed = event(1, now)
    old.get_model("ordering", "ProcessedEvent")._base_manager.create(
        tenant=tenant, order=order, event_type="order.paid", version=1
    )
    long_ago = event(2, now - timedelta(hours=2))
    recent = event(3, now)
    unpublished = event(4, None)

    new = migrate_to(AFTER).get_model("ordering", "OutboxEvent")
    consumed = dict(new._base_manager.values_list("pk", "consumed_at"))
    assert consumed[processed.pk] is not None and consumed[long_ago.pk] is not None
    assert consumed[recent.pk] is None and consumed[unpublished.pk] is None


@pytest.mark.django_db(transaction=True)
def test_rows_waiting_for_a_consumer_are_due_when_the_sweeper_would_have_sent_them(
    back_to_latest: None, settings
) -> None:
    """Migration 0013: each row sent and not consumed is due again its redelivery wait after
    its last send (doubled for each send before the last); the others are not due at all."""
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    before, after = [("ordering", "0012_outbox_consumed")], [("ordering", "0013_outbox_resend_at")]
    old = migrate_to(before)
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="mig", name="Mig")
    order = old.get_model("ordering", "Order")._base_manager.create(
        id=1, tenant=tenant, subtotal=0, total=0, number=1, business_day=timezone.now().date()
    )
    events = old.get_model("ordering", "OutboxEvent")._base_manager
    last = timezone.now() - timedelta(minutes=5)

    def event(version: int, **fields):
        return events.create(
            tenant=tenant, order=order, event_type="order.paid", version=version, **fields
        )

    once = event(1, published_at=last, last_publish_at=last, publish_attempts=1)
    thrice = event(2, published_at=last, last_publish_at=last, publish_attempts=3)
    consumed = event(3, published_at=last, last_publish_at=last, consumed_at=last)
    unpublished = event(4, last_publish_at=last, publish_attempts=1)

    new = migrate_to(after).get_model("ordering", "OutboxEvent")
    resend_at = dict(new._base_manager.values_list("pk", "resend_at"))
    assert resend_at[once.pk] == last + timedelta(minutes=10)
    assert resend_at[thrice.pk] == last + timedelta(minutes=40)
    assert resend_at[consumed.pk] is None and resend_at[unpublished.pk] is None
