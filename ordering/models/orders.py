"""Orders, their lines, and the lifecycle that moves them (django-fsm).

Lifecycle::

    CREATED -> PAYING -> PAID -> ACCEPTED -> PREPARING -> READY -> DELIVERING -> COMPLETED
    CREATED -> PAID                       (an order that costs nothing: no payment to make)
    PAYING -> PAYING                      (paying again once every payment was declined)
    CREATED | PAYING                      -> CANCELLED     (nothing paid: undone on the spot)
    PAID | ACCEPTED | PREPARING | READY   -> CANCELLING -> CANCELLED   (refund through the saga)

Each transition says who may make it (``custom={"by": ...}``): the diner (through a diner app),
the merchant (dashboard, merchant API key, staff in the admin), the payment provider (its signed
callback) or the cancel saga. The 409 answer of a refused move and the lifecycle diagram
(``ordering/order_moves.py``, ``manage.py draw_order_lifecycle``) read it from here.

Transitions only change the status in memory; services save them inside a transaction, where
:class:`~django_fsm.ConcurrentTransitionMixin` turns the save into
``UPDATE ... WHERE id = %s AND status = <status it was loaded with>``. Of two concurrent
attempts exactly one updates a row; the other raises ``ConcurrentTransition`` and rolls back.
"""

from __future__ import annotations

from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from ordering.models.payments import Payment
from tenants.diner_sessions import ERASED_PREFIX, GUEST_PREFIX
from tenants.models import Tenant
from tenants.scoping import TenantManager


class OrderStatus(models.TextChoices):
    CREATED = "CREATED"
    PAYING = "PAYING"
    PAID = "PAID"
    ACCEPTED = "ACCEPTED"
    PREPARING = "PREPARING"
    READY = "READY"
    DELIVERING = "DELIVERING"
    COMPLETED = "COMPLETED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"


S = OrderStatus
# Who may make a move (the ``by`` of each transition below).
DINER, MERCHANT, PROVIDER, SAGA = "diner", "merchant", "provider", "saga"
REFUNDABLE = [S.PAID, S.ACCEPTED, S.PREPARING, S.READY]


# how many payments one order may start: a diner whose cards keep being declined gets a clear
# refusal after this many, not an order holding an unbounded list of payments
MAX_PAYMENT_ATTEMPTS = 5


def has_no_payment(order: Order) -> bool:
    """CREATED -> PAYING only while no payment is attached (the first payment)."""
    return not order.payments.exists()


def costs_something(order: Order) -> bool:
    """A payment is started only for money: payment providers refuse an amount of 0.00, and a
    payment of nothing would later be "refunded" by a cancel (:func:`costs_nothing`)."""
    return order.total > 0


def costs_nothing(order: Order) -> bool:
    """CREATED -> PAID at once, with no payment, when a coupon or free dishes bring the total to
    0.00: there is nothing for a provider to take, nor for a cancel to refund."""
    return order.total == 0


def every_payment_declined(order: Order) -> bool:
    """PAYING -> PAYING (paying again) only when every payment attached so far was declined,
    and fewer than :data:`MAX_PAYMENT_ATTEMPTS` were started. While one is pending, whether
    the diner paid is the provider's to say, and a second one could take the money twice."""
    statuses = [payment.status for payment in order.payments.all()]
    return 0 < len(statuses) < MAX_PAYMENT_ATTEMPTS and set(statuses) == {Payment.Status.FAILED}


# Orders that still hold what a diner wrote (note, phone, address), whatever their status: the
# retention purge clears them once unchanged long enough (ordering/privacy/contact_retention.py).
CONTACT_TO_CLEAR = ~models.Q(note="") | ~models.Q(contact_phone="") | ~models.Q(delivery_address="")

# The orders the kitchen still has to act on: paid for and not finished (a refund under way
# included); the dashboard's board shows the newest of them however old
# (ordering.selectors.BOARD_OPEN_STATUSES), read through the partial index below, which the
# database uses only while its condition names these same statuses.
OPEN_STATUSES = (S.PAID, S.ACCEPTED, S.PREPARING, S.READY, S.DELIVERING, S.CANCELLING)

# Cancelled orders of guests, and of diners since erased (a guest erased keeps only the
# pseudonym): among them the guest order purge finds those to delete (ordering/privacy/
# guest_orders.py), through the partial index below, whose condition this is.
GUEST_CANCELLED = models.Q(status=S.CANCELLED) & (
    models.Q(diner_id__startswith=GUEST_PREFIX) | models.Q(diner_id__startswith=ERASED_PREFIX)
)


class Order(ConcurrentTransitionMixin, models.Model):
    id = models.BigIntegerField(primary_key=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="orders")
    diner_id = models.CharField(max_length=64, blank=True, db_index=True)
    placed_by_client = models.ForeignKey(
        "tenants.ApiClient", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = FSMField(default=S.CREATED, choices=S.choices, protected=True, db_index=True)
    payment_method = models.CharField(max_length=32)
    coupon = models.ForeignKey(
        "ordering.Coupon", null=True, blank=True, on_delete=models.PROTECT, related_name="orders"
    )
    subtotal = models.DecimalField(max_digits=12, decimal_places=2)
    discount = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    total = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3, default="EUR")
    note = models.CharField(max_length=500, blank=True)
    # How to reach the diner and where to deliver: personal data, redacted from every stored
    # reply of the order endpoints (ordering/api/views.py, docs/data-protection.md).
    # db_default: the release before them inserts orders without them (docs/scaling.md)
    contact_phone = models.CharField(max_length=32, blank=True, default="", db_default="")
    delivery_address = models.CharField(max_length=300, blank=True, default="", db_default="")
    # What people say and see ("#0427"): a sequence per tenant and business day (the tenant's
    # time zone), allocated in the placing transaction (ordering/order_numbers.py). The 64-bit id
    # stays the reference in URLs and the API. NULL for orders placed before numbering existed.
    number = models.PositiveIntegerField(null=True, blank=True, editable=False)
    business_day = models.DateField(null=True, blank=True, editable=False)
    # NULL (not ""): orders placed without a key must not collide in the unique constraint.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [
            ("view_diner_details", "Can see what diners wrote on orders (note, phone, address)"),
            ("cancel_order", "Can cancel orders (refunding a paid one)"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"], name="uniq_order_tenant_idempotency_key"
            ),
            models.CheckConstraint(
                condition=models.Q(total__gte=0), name="order_total_not_negative"
            ),
            models.UniqueConstraint(
                fields=["tenant", "business_day", "number"], name="uniq_order_number_per_day"
            ),
        ]
        indexes = [
            # A restaurant's orders newest first (the board's newest cards, the order list's
            # pages), and its open ones (the board's open cards): each read walks its own rows
            # in that order and stops at its window, where the index of every restaurant's
            # orders by creation was walked through the others' rows, all of them for a
            # restaurant with no open order or only old ones, at each poll of each board.
            models.Index(fields=["tenant", "-created_at", "-id"], name="order_tenant_newest"),
            models.Index(
                fields=["tenant", "-created_at", "-id"],
                condition=models.Q(status__in=OPEN_STATUSES),
                name="order_tenant_open_newest",
            ),
            # A diner's orders of a restaurant newest first (a diner's pages of the order list
            # and their count): the index of every restaurant's orders by creation, or of every
            # restaurant's diners of that id, was walked through other diners' rows, every
            # order of the platform for a diner's page of a status it had none in.
            models.Index(
                fields=["tenant", "diner_id", "-created_at", "-id"],
                name="order_tenant_diner_newest",
            ),
            # ... and by status (the count of a diner's list filtered by status, which read
            # every restaurant's orders of that status, or every restaurant's diners of that
            # id, dropping the others': the count reads only the rows it counts)
            models.Index(fields=["tenant", "diner_id", "status"], name="order_tenant_diner_status"),
            # The finished orders that still hold what a diner wrote: the retention purge clears
            # them (ordering/privacy/contact_retention.py) and /metrics counts those overdue,
            # reading this small index instead of every order; a cleared order leaves it.
            models.Index(
                fields=["updated_at"], condition=CONTACT_TO_CLEAR, name="order_contact_to_clear"
            ),
            # Guests' cancelled orders: the guest order purge (every hour, its batches in
            # primary key order) and /metrics' count of its overdue rows (every scrape) read
            # this instead of every guest's order ever placed, or every order
            # (ordering/privacy/guest_orders.py).
            models.Index(fields=["id"], condition=GUEST_CANCELLED, name="order_guest_cancelled"),
        ]

    def __str__(self) -> str:
        return f"order {self.number_label} ({self.status})"

    @property
    def number_label(self) -> str:
        return number_label(self.number, self.id)

    @transition(
        field=status,
        source=S.CREATED,
        target=S.PAYING,
        conditions=[has_no_payment, costs_something],
        custom={"by": (DINER,)},
    )
    def start_payment(self) -> None:
        """The diner started paying; the Payment is created in the same transaction."""

    @transition(
        field=status,
        source=S.CREATED,
        target=S.PAID,
        conditions=[has_no_payment, costs_nothing],
        custom={"by": (DINER,)},
    )
    def settle_without_payment(self) -> None:
        """The diner paid an order that costs nothing: settled at once, no provider asked and no
        Payment made (``ordering.services.payments.pay_order``)."""

    @transition(
        field=status,
        source=S.PAYING,
        target=S.PAYING,
        conditions=[every_payment_declined],
        custom={"by": (DINER,)},
    )
    def pay_again(self) -> None:
        """Every payment so far was declined: the diner pays with another card; the new
        Payment is created in the same transaction."""

    @transition(field=status, source=S.PAYING, target=S.PAID, custom={"by": (PROVIDER,)})
    def mark_paid(self) -> None:
        """The provider confirmed the payment."""

    @transition(field=status, source=S.PAID, target=S.ACCEPTED, custom={"by": (MERCHANT,)})
    def accept(self) -> None:
        """The restaurant took the order."""

    @transition(field=status, source=S.ACCEPTED, target=S.PREPARING, custom={"by": (MERCHANT,)})
    def start_preparing(self) -> None:
        """The kitchen started cooking."""

    @transition(field=status, source=S.PREPARING, target=S.READY, custom={"by": (MERCHANT,)})
    def mark_ready(self) -> None:
        """Food is ready for pick-up by the courier."""

    @transition(field=status, source=S.READY, target=S.DELIVERING, custom={"by": (MERCHANT,)})
    def dispatch(self) -> None:
        """A courier is on the way."""

    @transition(field=status, source=S.DELIVERING, target=S.COMPLETED, custom={"by": (MERCHANT,)})
    def complete(self) -> None:
        """Delivered."""

    @transition(
        field=status,
        source=[S.CREATED, S.PAYING],
        target=S.CANCELLED,
        custom={"by": (DINER, MERCHANT)},
    )
    def cancel_unpaid(self) -> None:
        """Nothing was paid: stock and coupon are returned in the same transaction."""

    @transition(
        field=status, source=REFUNDABLE, target=S.CANCELLING, custom={"by": (DINER, MERCHANT)}
    )
    def request_cancel(self) -> None:
        """Paid: the cancel saga (restock, coupon, delivery, refund) completes it later."""

    @transition(field=status, source=S.CANCELLING, target=S.CANCELLED, custom={"by": (SAGA,)})
    def finish_cancel(self) -> None:
        """Every compensation step of the saga succeeded."""


def number_label(number: int | None, order_id: int) -> str:
    """``#0427``; an order placed before numbering existed shows its id."""
    return f"#{number:04d}" if number is not None else f"#{order_id}"


class OrderLine(models.Model):
    """One dish of an order, with its name and price frozen at ordering time."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    dish = models.ForeignKey("ordering.Dish", on_delete=models.PROTECT, related_name="+")
    dish_name = models.CharField(max_length=200)
    unit_price = models.DecimalField(max_digits=10, decimal_places=2)
    quantity = models.PositiveIntegerField()
    line_total = models.DecimalField(max_digits=12, decimal_places=2)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.dish_name}"


class OrderTransition(models.Model):
    """Every status change: who, when, from, to (append-only)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=16, choices=S.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=S.choices)
    actor = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.from_status} -> {self.to_status}"
