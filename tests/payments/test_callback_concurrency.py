"""20 identical callbacks at once (the provider retrying over a slow network): one applies."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from idempotency.models import DuplicateAudit
from idempotency.stores.audit_stream import drain_audits
from ordering.models import (
    EventType,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    PaymentCallback,
)
from tests.payments.helpers import paying_order, post_callback, signed

CALLERS = 20


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_identical_callbacks_make_one_paid_transition(tenant, menu):
    # given an order waiting for its payment, and the provider's signed "succeeded" event
    order, payment = paying_order(tenant, menu["pizza"])
    body, headers = signed(payment, event_id="evt_storm")
    barrier = threading.Barrier(CALLERS)
    results: list[object] = [None] * CALLERS

    def deliver(i: int) -> None:
        try:
            barrier.wait()
            results[i] = post_callback(APIClient(), body, headers)
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    # when 20 deliveries arrive at the same instant, each on its own database connection
    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # then every delivery got a 200, exactly one applied it and 19 were duplicates
    assert [getattr(r, "status_code", r) for r in results] == [200] * CALLERS
    outcomes = sorted(r.json()["result"] for r in results)
    assert outcomes == ["applied"] + ["duplicate"] * (CALLERS - 1)
    # and the database holds one PAID transition, one payment, one inbox row, one event
    assert order.payments.count() == 1
    assert Payment.objects.for_tenant(tenant).get().status == Payment.Status.SUCCEEDED
    paid = OrderTransition.objects.for_tenant(tenant).filter(order=order, to_status="PAID")
    assert paid.count() == 1
    assert order.__class__.all_tenants.get(pk=order.pk).status == OrderStatus.PAID
    assert PaymentCallback.objects.for_tenant(tenant).count() == 1
    assert (
        OutboxEvent.objects.for_tenant(tenant).filter(event_type=EventType.ORDER_PAID).count() == 1
    )
    # and each absorbed duplicate is audited for staff
    drain_audits()
    hits = DuplicateAudit.objects.filter(tenant_key=str(tenant.pk), outcome="HIT")
    assert hits.count() == CALLERS - 1
