"""Orders left unpaid give their portions back: CREATED past the window is cancelled by the
platform, never an order the diner is paying (ordering/expiry.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from ordering import expiry
from ordering.errors import OrderingError
from ordering.expiry import expire_unpaid_orders
from ordering.models import (
    Coupon,
    Dish,
    Order,
    OrderStatus,
    OrderTransition,
    Payment,
    ProviderConflict,
    SimulatedOperation,
)
from ordering.models.menu import MAX_STOCK
from ordering.payments.callbacks import handle_payment_callback
from ordering.payments.reconciliation import reconcile_payments
from ordering.payments.signatures import SIGNATURE_HEADER, TIMESTAMP_HEADER
from ordering.payments.simulated import book, complete_payment, signed_callback
from ordering.services.lifecycle import EXPIRY_ACTOR, expire_unpaid_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tests.conftest import api_for, menu_for
from tests.support.concurrency import at_once

S = OrderStatus
WINDOW = 1800


@pytest.fixture(autouse=True)
def window(settings):
    settings.UNPAID_ORDER_EXPIRY_SECONDS = WINDOW


def placed(tenant, menu, *, minutes_ago: float, coupon: str | None = None) -> Order:
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=menu["pasta"].pk, quantity=2)],
        payment_method="card",
        coupon_code=coupon,
        diner_id="diner-1",
        actor="test",
    )
    Order.all_tenants.filter(pk=order.pk).update(
        created_at=timezone.now() - timedelta(minutes=minutes_ago)
    )
    return order


def stock(dish: Dish) -> int:
    dish.refresh_from_db()
    return dish.stock


def status(order: Order) -> str:
    return Order.all_tenants.get(pk=order.pk).status


@pytest.mark.django_db
def test_an_order_left_unpaid_gives_back_its_portions_and_coupon(tenant, menu, coupon):
    old = placed(tenant, menu, minutes_ago=31, coupon=coupon.code)
    young = placed(tenant, menu, minutes_ago=29)
    paying = placed(tenant, menu, minutes_ago=60)
    pay_order(tenant=tenant, order_id=paying.pk, actor="test")
    assert stock(menu["pasta"]) == 44

    assert expire_unpaid_orders() == 1
    assert (status(old), status(young), status(paying)) == (S.CANCELLED, S.CREATED, S.PAYING)
    assert stock(menu["pasta"]) == 46
    assert Coupon.all_tenants.get(pk=coupon.pk).used_count == 0
    log = OrderTransition.all_tenants.get(order=old, to_status=S.CANCELLED)
    assert (log.from_status, log.actor) == (S.CREATED, EXPIRY_ACTOR)
    assert expire_unpaid_orders() == 0  # once


@pytest.mark.django_db
def test_the_diner_who_comes_back_is_told_the_order_was_cancelled(tenant, menu):
    order = placed(tenant, menu, minutes_ago=45)
    expire_unpaid_orders()
    diner: APIClient = api_for(tenant, diner="diner-1")
    answer = diner.post(f"/api/v1/orders/{order.pk}/pay/", HTTP_IDEMPOTENCY_KEY="pay-late")
    assert answer.status_code == 409
    assert (answer.json()["code"], answer.json()["order_status"]) == (
        "ORDER_STATUS_CONFLICT",
        "CANCELLED",
    )


@pytest.mark.django_db
def test_a_window_of_zero_expires_nothing(tenant, menu, settings):
    settings.UNPAID_ORDER_EXPIRY_SECONDS = 0
    order = placed(tenant, menu, minutes_ago=60 * 24 * 30)
    assert expire_unpaid_orders() == 0 and status(order) == S.CREATED


@pytest.mark.django_db(transaction=True)
def test_a_diner_paying_as_the_order_expires_either_pays_or_is_refused_never_both(tenant, menu):
    for _ in range(6):  # which comes first varies from round to round
        order = placed(tenant, menu, minutes_ago=31)
        expired, paid = at_once(
            expire_unpaid_orders,
            lambda o=order: pay_order(tenant=tenant, order_id=o.pk, actor="diner"),
        )
        order.refresh_from_db()
        if isinstance(paid, OrderingError):  # the expiry came first
            assert expired == 1 and order.status == S.CANCELLED
            assert not order.payments.exists()
        else:  # the pay came first: the order is left to its payment
            assert expired == 0 and order.status == S.PAYING
            assert order.payments.get().status == "pending"


@pytest.mark.django_db(transaction=True)
def test_an_order_that_cannot_be_expired_does_not_hold_up_the_others(tenant, other_tenant, menu):
    """One order's cancel fails (its dish's stock set past the column's range by SQL, so the
    portions cannot go back): the other tenant's order is still expired (red: neither)."""
    stuck = placed(tenant, menu, minutes_ago=90)
    Dish.all_tenants.filter(pk=menu["pasta"].pk).update(stock=2**31 - 1)
    fine = placed(other_tenant, menu_for(other_tenant), minutes_ago=60)
    assert expire_unpaid_orders() == 1
    assert (status(stuck), status(fine)) == (S.CREATED, S.CANCELLED)


@pytest.mark.django_db
def test_one_run_expires_every_overdue_order_however_many_one_tenant_left(
    tenant, other_tenant, menu
):
    """Whoever holds a restaurant's public key can leave unpaid orders faster than one batch
    a run: a run that stopped after its batch fell further behind every minute, and another
    restaurant's overdue orders waited behind that backlog (oldest first), holding their
    portions far past the window (red: 2 of the 5, the other tenant's not among them)."""
    flood = [placed(tenant, menu, minutes_ago=60 - i) for i in range(4)]
    their_menu = menu_for(other_tenant)
    theirs = placed(other_tenant, their_menu, minutes_ago=40)
    young = placed(other_tenant, their_menu, minutes_ago=10)

    assert expire_unpaid_orders(batch=2) == 5

    assert {status(order) for order in [*flood, theirs]} == {S.CANCELLED}
    assert status(young) == S.CREATED


@pytest.mark.django_db
def test_a_run_that_keeps_finding_orders_it_cannot_expire_still_ends(tenant, menu):
    """Orders a run chose but could not expire (their cancel fails) are not chosen again in
    the same run, so a batch of them never keeps it going."""
    stuck = [placed(tenant, menu, minutes_ago=90 - i) for i in range(3)]
    Dish.all_tenants.filter(pk=menu["pasta"].pk).update(stock=2**31 - 1)

    assert expire_unpaid_orders(batch=1) == 0
    assert {status(order) for order in stuck} == {S.CREATED}


@pytest.mark.django_db
def test_a_dish_s_stock_is_bounded_for_every_form_that_writes_it(tenant, menu):
    dish = menu["pasta"]
    dish.stock = MAX_STOCK + 1
    with pytest.raises(ValidationError, match="stock"):
        dish.full_clean()


def declined(tenant, menu, *, minutes_ago: float) -> Order:
    """An order whose payment the provider declined ``minutes_ago`` (its callback came)."""
    order = placed(tenant, menu, minutes_ago=minutes_ago + 5)
    _, payment = pay_order(tenant=tenant, order_id=order.pk, actor="diner")
    result = complete_payment(
        provider_name=payment.provider, provider_txn_id=payment.provider_txn_id, status="failed"
    )
    assert result.outcome == "applied"
    earlier = timezone.now() - timedelta(minutes=minutes_ago)
    Order.all_tenants.filter(pk=order.pk).update(updated_at=earlier)
    Payment.all_tenants.filter(order=order).update(updated_at=earlier)
    return order


@pytest.mark.django_db
def test_an_order_whose_payment_was_declined_long_ago_gives_back_its_portions(tenant, menu):
    old = declined(tenant, menu, minutes_ago=31)
    recent = declined(tenant, menu, minutes_ago=20)  # the diner may still be deciding
    assert stock(menu["pasta"]) == 46
    assert expire_unpaid_orders() == 1  # red: 0, the portions held for good
    assert (status(old), status(recent)) == (S.CANCELLED, S.PAYING)
    assert stock(menu["pasta"]) == 48
    assert Payment.all_tenants.get(order=old).status == "failed"


@pytest.mark.django_db
def test_an_order_declined_again_as_the_expiry_reaches_it_is_left_to_the_diner(
    tenant, menu, monkeypatch
):
    order = declined(tenant, menu, minutes_ago=31)
    cancel = expiry.expire_unpaid_order

    def diner_pays_again_first(**kwargs):
        # between the expiry's listing of the order and its cancel, the diner came back, paid
        # again, and that card was declined too: they are deciding now
        _, again = pay_order(tenant=tenant, order_id=order.pk, actor="diner")
        complete_payment(
            provider_name=again.provider, provider_txn_id=again.provider_txn_id, status="failed"
        )
        return cancel(**kwargs)

    monkeypatch.setattr(expiry, "expire_unpaid_order", diner_pays_again_first)
    assert expire_unpaid_orders() == 0
    assert status(order) == S.PAYING


@pytest.mark.django_db
def test_a_declined_order_found_paid_after_all_is_a_conflict_for_staff(tenant, menu, settings):
    """Declined, expired, then the provider says a second card paid: staff refund it."""
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0
    order = declined(tenant, menu, minutes_ago=31)
    assert expire_unpaid_orders() == 1
    payment = Payment.all_tenants.get(order=order)
    book(payment=payment, status="succeeded")  # its callback lost
    assert reconcile_payments() == {"conflict": 1}
    assert ProviderConflict.all_tenants.get(order=order).kind == "paid_after_cancel"
    assert status(order) == S.CANCELLED


def pending(tenant, menu, *, hours_ago: float) -> tuple[Order, Payment]:
    """An order in PAYING whose one payment started ``hours_ago`` and is still pending."""
    order = placed(tenant, menu, minutes_ago=hours_ago * 60 + 5)
    _, payment = pay_order(tenant=tenant, order_id=order.pk, actor="diner")
    Payment.all_tenants.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(hours=hours_ago)
    )
    payment.refresh_from_db()
    return order, payment


@pytest.fixture
def pending_window(settings):
    settings.PENDING_PAYMENT_EXPIRY_SECONDS = 6 * 3600
    settings.PAYMENT_RECONCILE_AFTER_SECONDS = 0


@pytest.mark.django_db
def test_an_order_whose_payment_stays_pending_gives_its_portions_back_once_the_provider_was_asked(
    tenant, menu, pending_window
):
    old, old_payment = pending(tenant, menu, hours_ago=7)
    young, _ = pending(tenant, menu, hours_ago=5)
    assert stock(menu["pasta"]) == 46
    # not before the provider was asked about it: it may have taken the money
    assert expire_unpaid_orders() == 0
    assert (status(old), status(young)) == (S.PAYING, S.PAYING)
    # once reconciliation asked, and the provider had nothing settled
    assert reconcile_payments() == {"open": 2}
    assert expire_unpaid_orders() == 1  # red: 0, the portions held for good
    assert (status(old), status(young)) == (S.CANCELLED, S.PAYING)
    assert stock(menu["pasta"]) == 48
    old_payment.refresh_from_db()
    assert old_payment.status == Payment.Status.VOIDED
    log = OrderTransition.all_tenants.get(order=old, to_status=S.CANCELLED)
    assert (log.from_status, log.actor) == (S.PAYING, EXPIRY_ACTOR)
    assert expire_unpaid_orders() == 0  # once


@pytest.mark.django_db
def test_a_pending_payment_taken_after_its_order_expired_is_refunded(
    tenant, menu, pending_window, celery_eager, django_capture_on_commit_callbacks
):
    order, payment = pending(tenant, menu, hours_ago=7)
    reconcile_payments()
    assert expire_unpaid_orders() == 1
    # when the provider takes the money after all
    with django_capture_on_commit_callbacks(execute=True):
        result = complete_payment(
            provider_name=payment.provider, provider_txn_id=payment.provider_txn_id
        )
    # then the order stays cancelled and the money goes back, once
    assert (result.outcome, result.conflict) == ("conflict", "paid_after_cancel")
    payment.refresh_from_db()
    assert (status(order), payment.status) == (S.CANCELLED, Payment.Status.REFUNDED)
    refund = SimulatedOperation.objects.get(kind="refund")
    assert (refund.reference, refund.amount) == (payment.provider_txn_id, payment.amount)


@pytest.mark.django_db
def test_a_pending_window_of_zero_expires_no_order_with_a_pending_payment(
    tenant, menu, pending_window, settings
):
    settings.PENDING_PAYMENT_EXPIRY_SECONDS = 0
    order, _ = pending(tenant, menu, hours_ago=24 * 30)
    reconcile_payments()
    assert expire_unpaid_orders() == 0 and status(order) == S.PAYING


@pytest.mark.django_db
def test_an_order_paid_again_after_it_was_chosen_is_left_to_its_new_payment(
    tenant, menu, pending_window
):
    # given an order chosen for its old pending payment, which is then declined and paid again
    order, old = pending(tenant, menu, hours_ago=7)
    reconcile_payments()
    decided_at = timezone.now() - timedelta(hours=6)
    complete_payment(
        provider_name=old.provider, provider_txn_id=old.provider_txn_id, status="failed"
    )
    pay_order(tenant=tenant, order_id=order.pk, actor="diner")
    # when the expiry's cancel reaches it
    assert not expire_unpaid_order(
        tenant=tenant, order_id=order.pk, pending_started_before=decided_at
    )
    # then it is left as it is: the new payment is the provider's to settle
    assert status(order) == S.PAYING


@pytest.mark.django_db
def test_the_cancel_itself_refuses_a_payment_the_provider_was_never_asked_about(
    tenant, menu, pending_window
):
    order, _ = pending(tenant, menu, hours_ago=7)
    started_before = timezone.now() - timedelta(hours=6)
    assert not expire_unpaid_order(
        tenant=tenant, order_id=order.pk, pending_started_before=started_before
    )
    assert status(order) == S.PAYING


def declined_long_ago(tenant, menu) -> tuple[Order, Payment]:
    order = declined(tenant, menu, minutes_ago=31)
    return order, Payment.all_tenants.get(order=order)


def stalled(tenant, menu) -> tuple[Order, Payment]:
    order, payment = pending(tenant, menu, hours_ago=7)
    reconcile_payments()
    return order, payment


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("unpaid", [declined_long_ago, stalled], ids=["declined", "pending"])
def test_a_success_arriving_as_an_unpaid_order_expires_is_either_paid_or_refunded(
    tenant, menu, pending_window, unpaid
):
    for _ in range(6):  # which comes first varies from round to round
        order, payment = unpaid(tenant, menu)
        book(payment=payment, status="succeeded")
        body, headers = signed_callback(payment=payment, status="succeeded")
        expired, answered = at_once(
            expire_unpaid_orders,
            lambda b=body, h=headers, name=payment.provider: handle_payment_callback(
                provider_name=name,
                raw_body=b,
                timestamp=h[TIMESTAMP_HEADER],
                signature=h[SIGNATURE_HEADER],
            ),
        )
        if expired == 1:  # the expiry came first: the money no order wanted goes back
            assert (status(order), answered.conflict) == (S.CANCELLED, "paid_after_cancel")
            assert Payment.all_tenants.get(pk=payment.pk).unwanted_capture
        else:  # the callback came first: the order is paid, not expired
            assert (status(order), answered.outcome) == (S.PAID, "applied")


@pytest.mark.django_db(transaction=True)  # the sweep's commits, one order after the other
def test_with_unpaid_expiry_off_an_order_declined_as_the_sweep_reaches_it_is_left_to_the_diner(
    tenant, menu, pending_window, settings
):
    # given unpaid expiry off (declined orders are never expired) and two orders whose
    # payments stay pending, both chosen by the sweep once the provider was asked
    settings.UNPAID_ORDER_EXPIRY_SECONDS = 0
    first, _ = pending(tenant, menu, hours_ago=8)
    second, declined = pending(tenant, menu, hours_ago=7)
    assert reconcile_payments() == {"open": 2}
    # and the provider declines the second one's payment just as the sweep expired the first
    # (a trigger stands in for its callback, committing before the sweep reaches the second)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_decline_second() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN UPDATE ordering_payment SET status = 'failed', updated_at = now() "
            f"WHERE id = {declined.pk}; RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER test_decline_second AFTER UPDATE ON ordering_order FOR EACH ROW "
            f"WHEN (NEW.id = {first.pk} AND NEW.status = 'CANCELLED') "
            "EXECUTE FUNCTION test_decline_second()"
        )
    try:
        # when the sweep runs
        expire_unpaid_orders()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_decline_second ON ordering_order")
            cursor.execute("DROP FUNCTION test_decline_second()")
    # then the first is expired, and the second, declined a moment ago, is left to its diner
    # to pay again, as no declined order is expired with the window off
    declined.refresh_from_db()
    assert declined.status == Payment.Status.FAILED
    assert (status(first), status(second)) == (S.CANCELLED, S.PAYING)
