"""What payment providers told us: every authenticated callback once, and conflicts for staff.

:class:`PaymentCallback` is the webhook's inbox: ``unique(tenant, provider, event_id)`` lets the
database decide which of several concurrent deliveries of one provider event is applied; the
others are duplicates and change nothing. :class:`ProviderConflict` is a callback that contradicts
what we know (an amount that is not the order's, money captured for a cancelled order, an event id
received before with another event): nothing is changed automatically, staff decide.
"""

from __future__ import annotations

from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantManager


class PaymentCallback(models.Model):
    class Outcome(models.TextChoices):
        APPLIED = "applied", "Applied"
        DUPLICATE = "duplicate", "Duplicate (nothing changed)"
        CONFLICT = "conflict", "Conflict (recorded for staff)"
        IGNORED = "ignored", "Late or out of order (nothing changed)"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=32)
    event_id = models.CharField(max_length=100)
    provider_txn_id = models.CharField(max_length=100)
    order = models.ForeignKey("ordering.Order", on_delete=models.PROTECT, related_name="+")
    payment = models.ForeignKey(
        "ordering.Payment", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    status = models.CharField(max_length=16, help_text="What the provider reported")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    received_at = models.DateTimeField(auto_now_add=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider", "event_id"], name="uniq_payment_callback_event"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.event_id} {self.status} ({self.outcome})"


class ProviderConflict(models.Model):
    """A callback that contradicts what we know, open until staff resolve it with an outcome
    (what they did at the provider) and a note; ``resolved_by``/``resolved_at`` say who, when.
    ``ordering.payments.conflicts`` is the one writer of the resolution."""

    class Outcome(models.TextChoices):
        REFUNDED = "refunded", "Refunded at the provider"
        ACCEPTED = "accepted", "Accepted as paid"
        IGNORED = "ignored", "Ignored (no money to move)"

    class Kind(models.TextChoices):
        AMOUNT_MISMATCH = "amount_mismatch", "Amount or currency differs from the order"
        PAID_AFTER_CANCEL = "paid_after_cancel", "Captured after the order was cancelled"
        PAID_TWICE = "paid_twice", "Captured for an order another payment had already paid"
        UNEXPECTED_STATE = "unexpected_state", "Success for an order not awaiting payment"
        EVENT_ID_REUSED = "event_id_reused", "Event id received before, with another event"

    # money taken that the order did not want: the platform gives it back by itself
    # (ordering/payments/capture_refunds.py); the other kinds wait for staff
    REFUNDED_BY_PLATFORM = frozenset({Kind.PAID_AFTER_CANCEL, Kind.PAID_TWICE})

    # How each kind reads for the restaurant (the dashboard); staff read the labels above.
    MERCHANT_WORDS = {
        Kind.AMOUNT_MISMATCH: "the payment provider reported a different amount",
        Kind.PAID_AFTER_CANCEL: "money was taken after the order was cancelled",
        Kind.PAID_TWICE: "the diner paid twice: another payment had already paid the order",
        Kind.UNEXPECTED_STATE: "a payment was confirmed for an order no longer waiting for one",
        Kind.EVENT_ID_REUSED: "the payment provider's report of this payment could not be "
        "matched (it reused the id of an earlier report)",
    }

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(
        "ordering.Order", on_delete=models.PROTECT, related_name="provider_conflicts"
    )
    payment = models.ForeignKey(
        "ordering.Payment", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    provider = models.CharField(max_length=32)
    provider_txn_id = models.CharField(max_length=100)
    event_id = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    expected_amount = models.DecimalField(max_digits=12, decimal_places=2)
    expected_currency = models.CharField(max_length=3)
    reported_amount = models.DecimalField(max_digits=12, decimal_places=2)
    reported_currency = models.CharField(max_length=3)
    # what the event said of the payment; db_default: every conflict the release before
    # records is about a success (docs/scaling.md)
    reported_status = models.CharField(max_length=16, default="succeeded", db_default="succeeded")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    resolved = models.BooleanField(default=False, db_index=True)
    # db_default: the release before it inserts conflicts without it (docs/scaling.md)
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, blank=True, default="", db_default=""
    )
    resolved_by = models.CharField(max_length=150, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution_note = models.TextField(blank=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} on order {self.order_id} ({self.provider}:{self.provider_txn_id})"

    @property
    def refunded_by_platform(self) -> bool:
        return self.kind in self.REFUNDED_BY_PLATFORM

    @property
    def for_merchant(self) -> str:
        return self.MERCHANT_WORDS.get(self.kind, self.get_kind_display())
