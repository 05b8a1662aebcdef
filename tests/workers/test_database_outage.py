"""A Celery worker whose PostgreSQL goes away: an event it fails to consume meanwhile is retried
by Celery and consumed once the database is back, not left to the outbox sweeper's resend
(``OUTBOX_REDELIVER_AFTER_SECONDS``, 10 minutes by default).

The worker reaches the real test database through a TCP proxy that the test cuts and heals;
this process writes and reads the rows directly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings

from ordering.models import EventType, OutboxEvent, ProcessedEvent
from tests.payments.helpers import paid_order
from tests.support.slow_proxy import SlowProxy
from tests.support.waiting import wait_until
from tests.workers.conftest import CeleryWorker, running_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.fault, pytest.mark.django_db(transaction=True)]

RETRIED = "retry: Retry in"
FAILED = "raised unexpected"


def three_attempts_or_a_failure(worker: CeleryWorker) -> list[str] | None:
    """The worker's log lines of failed attempts at events, once there are three of them or
    one ended its task without a retry."""
    lines = [line for line in worker.log().splitlines() if RETRIED in line or FAILED in line]
    return lines if len(lines) >= 3 or any(FAILED in line for line in lines) else None


@pytest.fixture(scope="module")
def database_proxy() -> Iterator[SlowProxy]:
    proxy = SlowProxy(int(settings.DATABASES["default"]["PORT"]))
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def worker_behind_proxy(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, database_proxy: SlowProxy
) -> Iterator[CeleryWorker]:
    """A worker whose database is behind the proxy, allowed one retry of a failed event."""
    database = settings.DATABASES["default"]
    url = f"postgres://{database['USER']}@127.0.0.1:{database_proxy.port}/{database['NAME']}"
    with running_worker(
        tmp_path_factory.mktemp("celery-outage"),
        extra_env={"DATABASE_URL": url, "SAGA_MAX_RETRIES": "1"},
    ) as worker:
        yield worker


def test_an_event_failed_while_the_database_is_down_is_retried_and_consumed_once_it_is_back(
    worker_behind_proxy: CeleryWorker, database_proxy: SlowProxy, tenant, menu
) -> None:
    """The outage outlasts the retries the worker allows a failing event. Red: recording the
    retry needed the database too, so the task ended failed at once, with no retry; and then,
    the retries spent, at the second attempt."""
    database_proxy.cut()
    try:
        order, _ = paid_order(tenant, menu["pizza"])  # its order.paid goes to the worker
        paid = OutboxEvent.all_tenants.get(order=order, event_type=EventType.ORDER_PAID)
        attempts = wait_until(
            lambda: three_attempts_or_a_failure(worker_behind_proxy),
            what="the worker's first three attempts at the event",
            detail=lambda: worker_behind_proxy.log()[-4000:],
        )
    finally:
        database_proxy.heal()

    assert all(RETRIED in attempt for attempt in attempts), [a[:300] for a in attempts]
    wait_for(
        lambda: ProcessedEvent.all_tenants.filter(
            order_id=paid.order_id, event_type=paid.event_type, version=paid.version
        ).exists(),
        worker=worker_behind_proxy,
    )
    wait_for(
        lambda: OutboxEvent.all_tenants.get(pk=paid.pk).consumed_at is not None,
        worker=worker_behind_proxy,
    )
    wait_until(lambda: not worker_behind_proxy.busy(), what="the worker to go idle")
