"""What a finished order keeps in Redis: under 1 KB for a one-line order (its reply compressed,
and no per-field hashes once finished: finish.lua; docs/benchmarks.md)."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings

pytestmark = pytest.mark.django_db

ONE_KB = 1024


def test_a_finished_one_line_order_costs_redis_under_1kb(api, menu, tenant):
    # given a one-line order placed with a key (engine on, one Redis node)
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": 1}],
        "payment_method": "card",
        "note": "extra napkins, please",
    }
    placed = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert placed.status_code == 201 and placed.headers["X-Idempotent-Result"] == "MISS"
    # then its finished Redis entry keeps the reply compressed and takes under 1 KB
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*"))
    assert len(keys) == 1
    assert client.hget(keys[0], "st") == b"d"
    assert len(placed.content) > 500  # the reply itself is most of it
    assert client.hget(keys[0], "res").startswith(b"SZ\x01")
    # and its Location, which a claim reads to audit a replay (claim_audit.lua)
    assert client.hget(keys[0], "loc") == placed.headers["Location"].encode()
    assert client.memory_usage(keys[0], samples=0) <= ONE_KB
    client.close()
