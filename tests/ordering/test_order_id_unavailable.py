"""Placing an order when no order ID can be issued: 503 ``ORDER_ID_UNAVAILABLE`` with
``Retry-After``, nothing written, nothing stored for the key; the retry places it once.

The conditions are real (``tests/support/order_id_conditions.py``): a generator whose clock
stepped back, worker ids leased in the real Redis, a lease given back. The orders go through the
HTTP API, the idempotency engine and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from ordering.models import Coupon, Dish, Order
from ordering.order_ids import ClockMovedBackwards, decode_order_id
from tenants.models import Tenant
from tests.support.order_id_conditions import (
    all_worker_ids_leased_elsewhere,
    clock_stepped_back,
    lease_given_back,
    worker_id_shared_with_another_process,
)

pytestmark = pytest.mark.django_db

KEY = "order-while-ids-are-unavailable"


def place(api: APIClient, menu: dict[str, Dish]) -> Any:
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": 2}],
        "payment_method": "card",
        "coupon_code": "TEN",
    }
    return api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=KEY)


def assert_refused_having_written_nothing(
    response: Any, *, retry_after: str, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon
) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"] == retry_after
    body = response.json()
    assert (body["code"], body["status"]) == ("ORDER_ID_UNAVAILABLE", 503)
    assert f"retry in {retry_after} s" in body["detail"]
    assert Order.objects.for_tenant(tenant).count() == 0
    assert Dish.objects.for_tenant(tenant).get(pk=menu["pizza"].pk).stock == 50
    coupon.refresh_from_db()
    assert coupon.used_count == 0


def assert_retry_places_exactly_one_order(
    api: APIClient, *, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon
) -> None:
    placed = place(api, menu)
    replayed = place(api, menu)
    assert placed.status_code == 201, placed.content
    assert replayed.status_code == 201 and replayed.json()["id"] == placed.json()["id"]
    assert list(Order.objects.for_tenant(tenant).values_list("pk", flat=True)) == [
        int(placed.json()["id"])
    ]
    assert Dish.objects.for_tenant(tenant).get(pk=menu["pizza"].pk).stock == 48
    coupon.refresh_from_db()
    assert coupon.used_count == 1


def test_clock_step_back_answers_503_until_it_has_caught_up(
    api: APIClient, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon
) -> None:
    with clock_stepped_back(ms=4_200) as clock:
        refused = place(api, menu)
        assert_refused_having_written_nothing(
            refused, retry_after="5", tenant=tenant, menu=menu, coupon=coupon
        )
        clock.step(ms=4_200)
        assert_retry_places_exactly_one_order(api, tenant=tenant, menu=menu, coupon=coupon)


def test_no_free_worker_id_answers_503_until_one_is_given_back(
    api: APIClient, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon, settings: Any
) -> None:
    settings.ORDER_ID_LEASE_SECONDS = 17
    with all_worker_ids_leased_elsewhere() as give_one_back:
        refused = place(api, menu)
        assert_refused_having_written_nothing(
            refused, retry_after="17", tenant=tenant, menu=menu, coupon=coupon
        )
        give_one_back()
        assert_retry_places_exactly_one_order(api, tenant=tenant, menu=menu, coupon=coupon)


def test_a_lease_given_back_answers_503_and_another_process_places_the_retry(
    api: APIClient, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon, settings: Any
) -> None:
    settings.ORDER_ID_LEASE_SECONDS = 17
    with lease_given_back():
        refused = place(api, menu)
    assert_refused_having_written_nothing(
        refused, retry_after="17", tenant=tenant, menu=menu, coupon=coupon
    )
    assert_retry_places_exactly_one_order(api, tenant=tenant, menu=menu, coupon=coupon)


def test_an_id_another_process_issued_too_answers_503_and_the_retry_gets_a_fresh_worker_id(
    api: APIClient, tenant: Tenant, menu: dict[str, Dish], coupon: Coupon
) -> None:
    with worker_id_shared_with_another_process() as shared:
        # given the other process placed an order under the shared worker id
        with shared.as_the_other_process():
            theirs = api.post(
                "/api/v1/orders/",
                {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "cash"},
                format="json",
                HTTP_IDEMPOTENCY_KEY="the-other-process-s-order",
            )
        assert theirs.status_code == 201, theirs.content
        shared_id = shared.other.worker_id
        # when this process issues the same ID for the next order of that dish and shard
        refused = place(api, menu)
        # then it is a 503 to retry, nothing of it written, and this process has already
        # given the shared id up for one of its own (no heartbeat ran: 300 s leases)
        assert refused.status_code == 503, refused.content
        assert refused["Retry-After"] == "1"
        assert refused.json()["code"] == "ORDER_ID_UNAVAILABLE"
        assert "retry in 1 s with the same Idempotency-Key" in refused.json()["detail"]
        assert list(Order.objects.for_tenant(tenant).values_list("pk", flat=True)) == [
            int(theirs.json()["id"])
        ]
        assert Dish.objects.for_tenant(tenant).get(pk=menu["pizza"].pk).stock == 49
        coupon.refresh_from_db()
        assert coupon.used_count == 0
        assert shared.ours.is_valid() and shared.ours.worker_id != shared_id
        # and the retry with the same key places the order once, under the new id
        placed, replayed = place(api, menu), place(api, menu)
        assert placed.status_code == 201, placed.content
        assert replayed.json()["id"] == placed.json()["id"]
        assert decode_order_id(int(placed.json()["id"])).worker_id == shared.ours.worker_id
        assert Order.objects.for_tenant(tenant).count() == 2
        assert Dish.objects.for_tenant(tenant).get(pk=menu["pizza"].pk).stock == 47


@pytest.mark.parametrize(
    ("backstep_ms", "seconds"), [(201, 1), (1_000, 1), (1_000.5, 2), (59_999, 60)]
)
def test_retry_after_is_the_step_back_rounded_up_to_whole_seconds(
    backstep_ms: float, seconds: int
) -> None:
    assert ClockMovedBackwards("stepped back", backstep_ms=backstep_ms).retry_after_seconds == (
        seconds
    )
