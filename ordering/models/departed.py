"""Payments of a restaurant that left, kept by the platform for a capture reported late.

An offboarding closes a restaurant's tables once none of its payments awaits the provider,
then deletes them. A provider may still report a capture afterwards (of a payment our side
had voided or seen declined): with the payment fenced or gone, the webhook had nothing to
apply it to, and the diner's money stayed taken. So when the tables close, each payment of
the restaurant that could still be captured is copied here (:mod:`ordering.payments.
departed`), and a capture reported for one is refunded by the platform, once.

No foreign key to the tenant, on purpose: the fence (:mod:`tenants.write_fence`) closes and
the offboarding deletes every table with one, and these rows must outlive both. No personal
data: the provider's ids, the amount, the restaurant's id and slug, the order's id and status.
Kept ``DEPARTED_PAYMENT_RETENTION_DAYS`` after their last change, then purged by the
retention purge, unless a refund is still to be made or waits for staff.
"""

from __future__ import annotations

from django.db import models

from ordering.models.orders import OrderStatus

_LETTER_PREFIX = "departed:"
_LETTER_SUFFIX = ":refund_capture"


class DepartedPayment(models.Model):
    class Refund(models.TextChoices):
        NONE = "", "No capture reported"
        PENDING = "pending", "Captured: the platform's refund to run or running"
        DONE = "done", "Captured and refunded by the platform"
        FAILED = "failed", "Captured: the refund failed for good (dead letter for staff)"
        SETTLED = "settled", "Captured: settled by staff (dead letter discarded)"

    # still to move, or waiting for staff: never purged in these
    KEPT_WHILE = (Refund.PENDING, Refund.FAILED)

    provider = models.CharField(max_length=32)
    provider_txn_id = models.CharField(max_length=100)
    order_ref = models.BigIntegerField(help_text="The order's id (the order itself is gone)")
    order_status = models.CharField(max_length=16, choices=OrderStatus.choices)
    payment_status = models.CharField(max_length=16, help_text="The payment's status at the close")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    tenant_ref = models.BigIntegerField(db_index=True)
    tenant_slug = models.CharField(max_length=64)
    recorded_at = models.DateTimeField(help_text="When the restaurant's tables closed")
    # what the provider reported afterwards, and the platform's refund of it
    capture_event_id = models.CharField(max_length=100, blank=True)
    captured_at = models.DateTimeField(null=True, blank=True)
    captured_amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    captured_currency = models.CharField(max_length=3, blank=True)
    refund = models.CharField(max_length=16, choices=Refund.choices, blank=True, default="")
    refund_attempts = models.PositiveIntegerField(default=0)
    refund_last_error = models.TextField(blank=True)
    refund_result = models.JSONField(default=dict, blank=True)
    refunded_at = models.DateTimeField(null=True, blank=True)
    settled_by = models.CharField(max_length=150, blank=True)
    settlement_note = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-recorded_at", "-id"]
        verbose_name = "payment of a departed restaurant"
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "provider_txn_id"], name="uniq_departed_payment_txn"
            ),
        ]
        indexes = [
            # the resend sweep reads only the refunds to run
            models.Index(
                fields=["updated_at"],
                condition=models.Q(refund="pending"),
                name="departed_refund_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.provider_txn_id} of {self.tenant_slug}"

    @property
    def refund_key(self) -> str:
        """The provider's idempotency key of the platform's refund: one per payment."""
        return f"refund-departed:{self.provider}:{self.provider_txn_id}"

    @property
    def letter_key(self) -> str:
        """The key of the refund's dead letter (its step, ``refund_capture``, last)."""
        return f"{_LETTER_PREFIX}{self.pk}{_LETTER_SUFFIX}"

    @staticmethod
    def pk_of_letter(key: str) -> int | None:
        """The row a dead letter's key names, or None for another letter's."""
        inner = key.removeprefix(_LETTER_PREFIX).removesuffix(_LETTER_SUFFIX)
        if inner == key or not inner.isdigit():
            return None
        return int(inner)
