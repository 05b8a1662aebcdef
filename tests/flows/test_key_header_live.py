"""The Idempotency-Key header as a real server hands it to the app."""

from __future__ import annotations

import http.client
import json

import pytest

from ordering.models import Order
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idempotency_key_header_sent_twice_is_refused_not_a_new_key(live_gunicorn_redis, shop):
    """Through gunicorn, which joins the two lines into ``K,K``: taken as a key, the next
    try with one header would place a second order (red: 201 MISS, then another 201 MISS)."""
    host, port = live_gunicorn_redis.url.removeprefix("http://").split(":")
    body = json.dumps(
        {"items": [{"dish_id": shop.dish.pk, "quantity": 1}], "payment_method": "card"}
    )

    def post(*keys: str) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_SECONDS)
        conn.putrequest("POST", "/api/v1/orders/")
        for name, value in {**shop.headers(), "Content-Type": "application/json"}.items():
            conn.putheader(name, value)
        for key in keys:
            conn.putheader("Idempotency-Key", key)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body.encode())
        answer = conn.getresponse()
        result = answer.status, json.loads(answer.read())
        conn.close()
        return result

    status, problem = post("twice-1", "twice-1")
    assert (status, problem["code"]) == (400, "IDEMPOTENCY_KEY_INVALID")
    assert post("twice-1")[0] == 201
    assert Order.all_tenants.filter(tenant=shop.tenant).count() == 1
