"""Migrations that index the orders table leave orders readable and writable while they build.

The orders table is the largest and busiest there is: a migration that builds an index of it
with a plain ``CREATE INDEX`` holds a lock that stops every write of an order (and, after a
``DROP INDEX`` in the same transaction, every read) for the whole build, about 1.5 s per
million orders here, and first waits behind any open transaction that wrote an order, every
request of the site queuing behind it meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from tests.support.migrations import Target, migrate_to

INDEXING_THE_ORDERS = [
    pytest.param(
        [("ordering", "0015_diner_details_permission")],
        [("ordering", "0016_order_contact_to_clear")],
        id="0016-add-index",
    ),
    pytest.param(
        [("ordering", "0021_sales_day_wider_sums")],
        [("ordering", "0022_order_contact_to_clear_any_status")],
        id="0022-replace-index",
    ),
]


def _dsn() -> str:
    settings = connection.settings_dict
    return (
        f"host={settings['HOST']} port={settings['PORT'] or 5432} "
        f"dbname={settings['NAME']} user={settings['USER']}"
    )


def _migrating_backend_waits(dsn: str, *, timeout: float = 20.0) -> None:
    """Until the migration's index statement waits on a lock (behind the open transaction)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query ILIKE %s AND wait_event_type = 'Lock'",
                ["%INDEX%order_contact_to_clear%"],
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError("the migration never reached its index statement")


@pytest.fixture
def migrating_in_background() -> Iterator[list[BaseException]]:
    errors: list[BaseException] = []
    yield errors
    assert not errors, errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("before", "after"), INDEXING_THE_ORDERS)
def test_orders_are_read_and_written_while_a_migration_indexes_them(
    back_to_latest: None,
    migrating_in_background: list[BaseException],
    before: Target,
    after: Target,
) -> None:
    # given two orders, one of them written by a transaction still open (a pay in progress)
    old = migrate_to(before)
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="idx", name="Idx")
    orders = old.get_model("ordering", "Order")._base_manager
    today = timezone.now().date()
    for pk in (1, 2):
        orders.create(id=pk, tenant=tenant, subtotal=0, total=0, number=pk, business_day=today)
    dsn = _dsn()
    holder = psycopg.connect(dsn)
    holder.execute("UPDATE ordering_order SET note = 'paying' WHERE id = 1")

    # when the migration runs, and reaches its index statement
    def migrate() -> None:
        try:
            migrate_to(after)
        except BaseException as exc:  # reported by the fixture
            migrating_in_background.append(exc)
        finally:
            connections.close_all()

    migrating = threading.Thread(target=migrate)
    migrating.start()
    try:
        _migrating_backend_waits(dsn)

        # then another order is read and written at once, not queued behind the migration
        with psycopg.connect(dsn, autocommit=True) as writer:
            writer.execute("SET lock_timeout = '2s'")
            writer.execute("UPDATE ordering_order SET note = 'no onions' WHERE id = 2")
            assert writer.execute("SELECT note FROM ordering_order WHERE id = 2").fetchone() == (
                "no onions",
            )
    finally:
        holder.commit()
        holder.close()
        migrating.join(60)
    assert not migrating.is_alive()
