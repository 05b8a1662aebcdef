"""Migration 0012: outbox rows published before consumption was recorded count as consumed
when a consumer processed them or they were published over an hour ago; the others may be sent
once more (the consumers' inbox absorbs it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("ordering", "0011_conflict_paid_twice")]
AFTER = [("ordering", "0012_outbox_consumed")]


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_earlier_rows_count_as_consumed_when_processed_or_old(back_to_latest: None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
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

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)

    new = executor.loader.project_state(AFTER).apps.get_model("ordering", "OutboxEvent")
    consumed = dict(new._base_manager.values_list("pk", "consumed_at"))
    assert consumed[processed.pk] is not None and consumed[long_ago.pk] is not None
    assert consumed[recent.pk] is None and consumed[unpublished.pk] is None
