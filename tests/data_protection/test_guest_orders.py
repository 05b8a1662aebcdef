"""A guest's order cancelled before any payment is deleted once unchanged for
``GUEST_UNPAID_ORDER_RETENTION_DAYS``; every other order stays for the restaurant's books."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ordering.expiry import expire_unpaid_orders
from ordering.models import Order, OrderLine, OrderStatus, OrderTransition, Payment
from ordering.privacy.diners import erase_diner
from ordering.services.lifecycle import cancel_order
from ordering.services.placing import ItemRequest, place_order
from tenants.models import ApiClient, DinerSession
from tenants.retention import overdue_rows, purge_expired_data
from tests.conftest import menu_for

pytestmark = pytest.mark.django_db


def test_a_guest_s_order_expired_unpaid_goes_after_the_retention_and_no_other_order(
    tenant, settings
):
    """A guest's order the platform expired unpaid holds no money, and nobody can ask for it
    again (the guest's session, and with it the guest's only handle, ended within a day), yet
    it stayed, with the guest's id and actor, until the restaurant left the platform (red: the
    purge had no such kind)."""
    settings.GUEST_UNPAID_ORDER_RETENTION_DAYS = 30
    dish = menu_for(tenant)["pizza"]
    now = timezone.now()
    cases = {  # name -> (diner id, status, last change, a declined payment)
        "guest-expired-31d": ("guest_0a1b", None, now - timedelta(days=31), False),
        "guest-expired-29d": ("guest_2c3d", None, now - timedelta(days=29), False),
        "guest-declined-31d": ("guest_4e5f", OrderStatus.CANCELLED, now - timedelta(days=31), True),
        "guest-voided-31d": ("guest_5a6b", OrderStatus.CANCELLED, now - timedelta(days=31), True),
        "guest-completed-60d": (
            "guest_6a7b",
            OrderStatus.COMPLETED,
            now - timedelta(days=60),
            False,
        ),
        "diner-cancelled-60d": ("zoe", OrderStatus.CANCELLED, now - timedelta(days=60), False),
    }
    orders = {}
    for name, (diner_id, status, changed, declined) in cases.items():
        order = place_order(
            tenant=tenant,
            items=[ItemRequest(dish_id=dish.pk, quantity=1)],
            payment_method="card",
            diner_id=diner_id,
            actor=f"api:pk_test/diner:{diner_id}",
        )
        if declined:
            Payment.all_tenants.create(
                tenant=tenant,
                order=order,
                provider="simulated",
                provider_txn_id=f"t-{name}",
                method="card",
                amount=order.total,
                status=Payment.Status.VOIDED if "voided" in name else Payment.Status.FAILED,
            )
        orders[name] = (order.pk, status, changed)
    # the platform's own expiry cancels the unpaid ones (an hour past its window)
    assert expire_unpaid_orders(now=now + timedelta(hours=1)) >= 3
    for pk, status, changed in orders.values():
        fields = (
            {"updated_at": changed} if status is None else {"status": status, "updated_at": changed}
        )
        Order.all_tenants.filter(pk=pk).update(**fields)
    gone = orders["guest-expired-31d"][0]
    assert Order.all_tenants.get(pk=gone).status == OrderStatus.CANCELLED
    assert overdue_rows()["guest_unpaid_orders"] == 1

    purged = purge_expired_data()

    assert purged["guest_unpaid_orders"] == 1
    left = set(Order.all_tenants.values_list("pk", flat=True))
    assert left == {pk for name, (pk, _, _) in orders.items() if name != "guest-expired-31d"}
    assert not OrderLine.all_tenants.filter(order_id=gone).exists()
    assert not OrderTransition.all_tenants.filter(order_id=gone).exists()
    assert overdue_rows()["guest_unpaid_orders"] == 0
    assert purge_expired_data()["guest_unpaid_orders"] == 0


def test_a_guest_whose_session_still_lives_keeps_the_order(tenant, settings):
    """A guest's session is refreshed for up to ``DINER_SESSION_MAX_AGE_SECONDS`` (30 days,
    settable), and while it lives the guest lists their orders with it: the order stays until
    it has ended (red: it went however live the session)."""
    settings.GUEST_UNPAID_ORDER_RETENTION_DAYS = 30
    dish = menu_for(tenant)["pizza"]
    client = ApiClient.objects.create(
        tenant=tenant,
        name="app",
        kind=ApiClient.Kind.PUBLISHABLE,
        prefix="pkguest",
        secret_hash="0" * 64,
    )
    now = timezone.now()
    orders = {}
    for diner_id, session_expires in (
        ("guest_live", now + timedelta(hours=1)),
        ("guest_gone", now - timedelta(hours=1)),
    ):
        DinerSession.objects.create(
            tenant=tenant,
            diner_id=diner_id,
            client=client,
            is_guest=True,
            secret_hash="0" * 64,
            expires_at=session_expires,
        )
        order = place_order(
            tenant=tenant,
            items=[ItemRequest(dish_id=dish.pk, quantity=1)],
            payment_method="card",
            diner_id=diner_id,
            actor=f"api:pk_test/diner:{diner_id}",
        )
        Order.all_tenants.filter(pk=order.pk).update(
            status=OrderStatus.CANCELLED, updated_at=now - timedelta(days=31)
        )
        orders[diner_id] = order.pk

    purged = purge_expired_data()

    assert purged["guest_unpaid_orders"] == 1
    assert set(Order.all_tenants.values_list("diner_id", flat=True)) == {"guest_live"}


def test_an_erased_guest_s_unpaid_cancelled_order_still_goes_after_the_retention(tenant, settings):
    """Erasing a guest gives their orders the pseudonym (``erased-…``): the purge, which knew
    a guest's order by its ``guest_`` id, no longer found the one cancelled before payment, so
    the guest who asked to be erased had it kept until the restaurant left, longer than a guest
    who asked nothing (red). A registered diner's erased order stays, as every order of a
    registered diner does."""
    settings.GUEST_UNPAID_ORDER_RETENTION_DAYS = 30
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0
    dish = menu_for(tenant)["pizza"]
    old = timezone.now() - timedelta(days=31)
    orders = {}
    for diner_id in ("guest_9f8e", "zoe"):
        order = place_order(
            tenant=tenant,
            items=[ItemRequest(dish_id=dish.pk, quantity=1)],
            payment_method="card",
            diner_id=diner_id,
            actor=f"api:pk_test/diner:{diner_id}",
        )
        cancel_order(tenant=tenant, order_id=order.pk, actor=f"api:pk_test/diner:{diner_id}")
        Order.all_tenants.filter(pk=order.pk).update(updated_at=old)
        orders[diner_id] = order.pk
    for diner_id in orders:
        erase_diner(tenant=tenant, diner_id=diner_id, requested_by="dpo")
    erased = dict(Order.all_tenants.values_list("pk", "diner_id"))
    assert all(erased[pk].startswith("erased-") for pk in orders.values())
    assert overdue_rows()["guest_unpaid_orders"] == 1

    purged = purge_expired_data()

    assert purged["guest_unpaid_orders"] == 1
    assert set(Order.all_tenants.values_list("pk", flat=True)) == {orders["zoe"]}
    assert not OrderTransition.all_tenants.filter(order_id=orders["guest_9f8e"]).exists()
