"""Migration 0012: outbox rows published before consumption was recorded count as consumed
when a consumer processed them or they were published over an hour ago; the others may be sent
once more (the consumers' inbox absorbs it). Migration 0013: rows waiting for a consumer get
the time the sweeper sends them again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from importlib import import_module
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
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


@pytest.mark.django_db(transaction=True)
def test_the_outbox_is_read_and_written_while_0012_marks_its_earlier_rows(
    back_to_latest: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are marked a batch at a time, each its own transaction: with one UPDATE of every
    row in the transaction that added the column, the column's lock stopped every read and write
    of the outbox (every pay writes an event) until the last row was marked, 34 s over 1,000,000
    events. Here the marking is held up on one tenant's row (a transaction holds the tenant's
    row, which the fence's trigger locks for each row it updates) while another tenant's events,
    one of them marked in the batch before, are read and written."""
    monkeypatch.setattr(import_module("ordering.migrations.0012_outbox_consumed"), "BATCH", 1)
    old = migrate_to(BEFORE)
    tenants = old.get_model("tenants", "Tenant").objects
    held, other = tenants.create(slug="held", name="Held"), tenants.create(slug="oth", name="Oth")
    orders = old.get_model("ordering", "Order")._base_manager
    events = old.get_model("ordering", "OutboxEvent")._base_manager
    long_ago = timezone.now() - timedelta(hours=2)
    for pk, tenant in ((1, other), (2, held)):
        order = orders.create(
            id=pk, tenant=tenant, subtotal=0, total=0, number=pk, business_day=long_ago.date()
        )
        events.create(
            tenant=tenant, order=order, event_type="order.paid", version=1, published_at=long_ago
        )
    with _migrating_while_held(AFTER, held, lock="%UPDATE ordering_outboxevent%") as dsn:
        _write_another_tenants_events(dsn, other, order_id=2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT order_id, consumed_at FROM ordering_outboxevent WHERE version = 1")
        assert set(cursor.fetchall()) == {(1, long_ago), (2, long_ago)}


@pytest.mark.django_db(transaction=True)
def test_the_outbox_is_read_and_written_while_0013_sets_when_its_events_are_due(
    back_to_latest: None, settings
) -> None:
    """Migration 0013 drops an index, writes each waiting event's resend time and builds an
    index, none of it in one transaction: in one, the drop's lock stopped every read and write
    of the outbox (every pay writes an event) until the new index was built, 0.88 s over
    1,000,000 events, and each waiting event's own UPDATE before that. Here the writing is held
    up on one tenant's event while another tenant's events are read and written."""
    settings.OUTBOX_REDELIVER_AFTER_SECONDS = 600
    old = migrate_to([("ordering", "0012_outbox_consumed")])
    tenants = old.get_model("tenants", "Tenant").objects
    held, other = tenants.create(slug="held", name="Held"), tenants.create(slug="oth", name="Oth")
    orders = old.get_model("ordering", "Order")._base_manager
    events = old.get_model("ordering", "OutboxEvent")._base_manager
    last = timezone.now() - timedelta(minutes=5)
    for pk, tenant in ((1, other), (2, held)):
        order = orders.create(
            id=pk, tenant=tenant, subtotal=0, total=0, number=pk, business_day=last.date()
        )
        events.create(
            tenant=tenant,
            order=order,
            event_type="order.paid",
            version=1,
            published_at=last,
            last_publish_at=last,
            publish_attempts=1,
        )
    migration = [("ordering", "0013_outbox_resend_at")]
    with _migrating_while_held(migration, held, lock="%UPDATE %ordering_outboxevent%") as dsn:
        _write_another_tenants_events(dsn, other, order_id=1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT order_id, resend_at FROM ordering_outboxevent WHERE version = 1")
        due = last + timedelta(minutes=10)
        assert set(cursor.fetchall()) == {(1, due), (2, due)}


@contextmanager
def _migrating_while_held(target: list, held: Any, *, lock: str) -> Iterator[str]:
    """Migrate to ``target`` in a thread while ``held``'s tenant row is locked (the write
    fence locks it for each of that tenant's rows updated, so the migration waits there);
    yield the database's DSN once a statement like ``lock`` waits, then release the tenant
    and require the migration to finish."""
    dsn = _dsn()
    holder = psycopg.connect(dsn)
    holder.execute("SELECT id FROM tenants_tenant WHERE id = %s FOR UPDATE", [held.pk])
    failures: list[BaseException] = []

    def migrate() -> None:
        try:
            migrate_to(target)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    migrating = threading.Thread(target=migrate)
    migrating.start()
    try:
        _waits_on_a_lock(dsn, lock)
        yield dsn
    finally:
        holder.commit()
        holder.close()
        migrating.join(60)
    assert not failures and not migrating.is_alive()


def _write_another_tenants_events(dsn: str, other: Any, *, order_id: int) -> None:
    """Insert an event of ``other`` and update an existing one, each within 2 s of lock wait."""
    with psycopg.connect(dsn, autocommit=True) as writer:
        writer.execute("SET lock_timeout = '2s'")
        writer.execute(
            "INSERT INTO ordering_outboxevent (tenant_id, order_id, event_type, version, "
            "payload, created_at, publish_attempts, last_error) "
            "VALUES (%s, %s, 'order.cancel_requested', 2, '{}', now(), 0, '')",
            [other.pk, order_id],
        )
        writer.execute(
            "UPDATE ordering_outboxevent SET publish_attempts = publish_attempts WHERE order_id = 1"
        )
        assert writer.execute("SELECT count(*) FROM ordering_outboxevent").fetchone() == (3,)


def _dsn() -> str:
    settings = connection.settings_dict
    return (
        f"host={settings['HOST']} port={settings['PORT'] or 5432} "
        f"dbname={settings['NAME']} user={settings['USER']}"
    )


def _waits_on_a_lock(dsn: str, query: str, *, timeout: float = 20.0) -> None:
    """Until a statement like ``query`` waits on a lock."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            if watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query ILIKE %s AND wait_event_type = 'Lock'",
                [query],
            ).fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"no statement like {query!r} waited")
