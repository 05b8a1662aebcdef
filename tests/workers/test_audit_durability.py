"""Audits survive a SIGKILLed web worker: every replay a client saw is in the database.

A live gunicorn (4 workers, Redis + database) answers a replay storm on one key while one of
its workers is SIGKILLed mid-storm; the real Celery worker then runs the drain task that beat
schedules. Each replay's audit left the process (XADD) before its answer did, so:

    replays the clients saw  <=  HIT audit rows  <=  seen + requests that got no answer

(the upper bound: requests in flight on the killed worker, whose XADD may or may not have
happened). The hourly counters agree with the rows, and the first execution is counted once.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from idempotency.models import DuplicateAudit, OutcomeCount
from idempotency.stores.audit_stream import stream_key
from ordering.models import Dish
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.flows.conftest import ONE_REDIS_ENV
from tests.support.auth import diner_token
from tests.support.live_server import LiveServer, live_gunicorn
from tests.workers.conftest import CeleryWorker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def live_audit_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """4 sync workers with Redis; a generous start-up deadline (the machine may be busy)."""
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path_factory.mktemp("audit-server"),
        env=ONE_REDIS_ENV,
        ready_timeout=120,
    ) as server:
        yield server


ROUNDS = 4
PER_ROUND = 48
KILL_AFTER = 12  # answers of the second round before one worker is SIGKILLed


def counted(tenant_key: str, outcome: str) -> int:
    return sum(
        OutcomeCount.objects.filter(tenant_key=tenant_key, outcome=outcome).values_list(
            "count", flat=True
        )
    )


async def replay_round(
    server: LiveServer, headers: dict[str, str], body: dict, *, kill: int | None
) -> list[httpx.Response | Exception]:
    """PER_ROUND identical requests at once, each on its own connection; with ``kill``, that
    worker is SIGKILLed once KILL_AFTER answers have come back."""
    limits = httpx.Limits(max_connections=PER_ROUND, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0, limits=limits) as client:
        tasks = [
            asyncio.ensure_future(client.post("/api/v1/orders/", headers=headers, json=body))
            for _ in range(PER_ROUND)
        ]
        results: list[httpx.Response | Exception] = []
        for future in asyncio.as_completed(tasks):
            try:
                results.append(await future)
            except httpx.TransportError as exc:  # its worker died under it
                results.append(exc)
            if kill is not None and len(results) == KILL_AFTER:
                os.kill(kill, signal.SIGKILL)
        return results


def test_replays_seen_by_clients_are_all_audited_after_a_worker_is_sigkilled(
    live_audit_server: LiveServer, celery_worker: CeleryWorker
) -> None:
    tenant = Tenant.objects.create(slug="audit-storm", name="Audit Storm")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=100
    )
    backend, _ = issue_api_key(tenant=tenant, name="pos", kind=ApiClient.Kind.MERCHANT)
    tenant_key = str(tenant.pk)
    headers = {
        "Authorization": f"Bearer {diner_token(tenant, 'd1', client=backend)}",
        "Idempotency-Key": f"storm-{uuid.uuid4()}",
    }
    body = {"items": [{"dish_id": dish.pk, "quantity": 1}], "payment_method": "card"}

    first = httpx.post(f"{live_audit_server.url}/api/v1/orders/", headers=headers, json=body)
    assert first.status_code == 201 and first.headers["X-Idempotent-Result"] == "MISS"
    # the first execution's count is batched in its worker: written within AUDIT_FLUSH_SECONDS
    wait_for(lambda: counted(tenant_key, "MISS") == 1, worker=celery_worker)

    victim = sorted(live_audit_server.worker_pids)[0]
    answers: list[httpx.Response | Exception] = []
    for n in range(ROUNDS):
        answers += asyncio.run(
            replay_round(live_audit_server, headers, body, kill=victim if n == 1 else None)
        )
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)  # the victim is gone (gunicorn started a replacement)
    replays = [
        a
        for a in answers
        if isinstance(a, httpx.Response) and a.headers.get("X-Idempotent-Result") == "HIT"
    ]
    unanswered = [a for a in answers if isinstance(a, Exception)]
    others = [a for a in answers if a not in replays and a not in unanswered]
    assert others == [] and all(r.content == first.content for r in replays)
    assert len(replays) >= ROUNDS * PER_ROUND - PER_ROUND  # the storm really was absorbed

    from config.celery import app

    app.send_task("ordering.drain_idempotency_audits")
    broker = redis.Redis.from_url(settings.REDIS_URL)
    wait_for(lambda: broker.xlen(stream_key()) == 0, worker=celery_worker)
    rows = DuplicateAudit.objects.filter(tenant_key=tenant_key, outcome="HIT").count()
    assert len(replays) <= rows <= len(replays) + len(unanswered), (
        f"{len(replays)} replays seen, {len(unanswered)} unanswered, {rows} audits"
    )
    assert counted(tenant_key, "HIT") == rows
    assert counted(tenant_key, "MISS") == 1
    print(f"replays seen {len(replays)}, unanswered {len(unanswered)}, audit rows {rows}")


def test_beat_schedules_the_drain_and_the_demo_runs_beat() -> None:
    """``make run`` (scripts/run_demo.sh) starts the worker with ``--beat``, whose schedule
    (config/settings.py) includes the drain, a task the worker has registered."""
    from config.celery import app

    [entry] = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if "audit" in e["task"]]
    assert entry["task"] in app.tasks and entry["schedule"] == settings.AUDIT_DRAIN_SECONDS
    demo = (Path(settings.BASE_DIR) / "scripts" / "run_demo.sh").read_text()
    assert re.search(r"celery -A config worker --beat", demo)
