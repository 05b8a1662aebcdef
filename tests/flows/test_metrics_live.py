"""Under gunicorn, /metrics merges every worker's counters (prometheus multiprocess mode)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.flows.conftest import METRICS_TOKEN, Shop
from tests.observability.test_metrics import value
from tests.support.waiting import DEADLINE_SECONDS


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_metrics_of_all_gunicorn_workers_are_merged(live_gunicorn_redis, shop: Shop):
    headers = shop.headers()  # the session is opened here, not inside the event loop

    async def fire() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=live_gunicorn_redis.url, limits=limits, timeout=DEADLINE_SECONDS
        ) as c:
            body = {"items": [{"dish_id": shop.dish.pk, "quantity": 1}], "payment_method": "card"}
            return await asyncio.gather(
                *(
                    c.post(
                        "/api/v1/orders/",
                        json=body,
                        headers={**headers, "Idempotency-Key": f"mp-{i}"},
                    )
                    for i in range(24)
                )
            )

    responses = asyncio.run(fire())
    assert {r.status_code for r in responses} == {201}
    served_by = {
        line.pid
        for line in live_gunicorn_redis.access_log()
        if line.key and line.key.startswith("mp-")
    }
    assert len(served_by) >= 2
    body = httpx.get(
        f"{live_gunicorn_redis.url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
        timeout=DEADLINE_SECONDS,
    ).text
    assert value(body, "idempotency_outcomes_total", tenant=shop.tenant_key, outcome="MISS") == 24
