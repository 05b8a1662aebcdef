"""A move that lost a race is decided again on the order as it is now
(``ordering.services.lifecycle.rerun_lost_races``): another move committed between the
request's read and its update, which says nothing about the request itself. Refused "changed
concurrently", the 409 was kept under the request's key and replayed to every retry for the
record's lifetime, although the order allowed the move from where the other one left it."""

from __future__ import annotations

import pytest

from ordering.models import Order, OrderStatus, Payment
from ordering.services.lifecycle import RACE_ATTEMPTS, LostRace, cancel_order, rerun_lost_races
from ordering.services.payments import pay_order
from tenants.models import ApiClient
from tests.conftest import api_for, menu_for
from tests.dashboard.factories import make_order
from tests.support.concurrency import committed_once_waited_on

S = OrderStatus


@pytest.mark.django_db(transaction=True)
def test_a_diner_s_cancel_that_meets_a_pay_committing_first_cancels_the_order(tenant):
    order = make_order(tenant, menu_for(tenant)["pizza"], S.CREATED)
    diner = api_for(tenant, diner="diner-1")

    # the cancel read the order CREATED; its update waited on the pay, which made it PAYING
    with committed_once_waited_on(
        lambda: pay_order(tenant=tenant, order_id=order.pk, actor="test", diner_id="diner-1")
    ):
        cancelled = diner.post(f"/api/v1/orders/{order.pk}/cancel/", HTTP_IDEMPOTENCY_KEY="c1")

    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == S.CANCELLED
    assert Order.all_tenants.get(pk=order.pk).status == S.CANCELLED
    assert list(Payment.all_tenants.filter(order=order).values_list("status", flat=True)) == [
        Payment.Status.VOIDED
    ]
    again = diner.post(f"/api/v1/orders/{order.pk}/cancel/", HTTP_IDEMPOTENCY_KEY="c1")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == cancelled.content


@pytest.mark.django_db(transaction=True)
def test_a_merchant_s_move_that_meets_a_cancel_committing_first_is_refused_for_the_status(tenant):
    """Refused still, but for what the order is now (CANCELLING), which a retry cannot change:
    not "changed concurrently", which invited one."""
    order = make_order(tenant, menu_for(tenant)["pizza"], S.PAID)
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)

    with committed_once_waited_on(
        lambda: cancel_order(tenant=tenant, order_id=order.pk, actor="test", diner_id="diner-1")
    ):
        accepted = merchant.post(
            f"/api/v1/orders/{order.pk}/transition/",
            {"to": S.ACCEPTED},
            format="json",
            HTTP_IDEMPOTENCY_KEY="m1",
        )

    assert accepted.status_code == 409
    body = accepted.json()
    assert body["order_status"] == S.CANCELLING
    assert body["detail"].startswith("A move to ACCEPTED is not allowed from CANCELLING."), body
    assert Order.all_tenants.get(pk=order.pk).status == S.CANCELLING


@pytest.mark.django_db
def test_a_move_that_keeps_losing_is_refused_after_its_attempts(tenant, menu):
    order = make_order(tenant, menu["pizza"], S.CREATED)
    calls = []

    @rerun_lost_races
    def always_beaten() -> None:
        calls.append(1)
        raise LostRace(order, "The order changed concurrently.")

    with pytest.raises(LostRace):
        always_beaten()
    assert len(calls) == RACE_ATTEMPTS == 3
