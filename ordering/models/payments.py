"""Payments attached to orders; a provider transaction id is recorded once."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantManager


class Payment(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        VOIDED = "voided", "Voided"
        REFUNDED = "refunded", "Refunded"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    order = models.ForeignKey("ordering.Order", on_delete=models.PROTECT, related_name="payments")
    provider = models.CharField(max_length=32)
    provider_txn_id = models.CharField(max_length=100)
    method = models.CharField(max_length=32)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3, default="EUR")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # money the provider took that its order did not want (taken after the order was
    # cancelled, or after another payment had paid it): given back by a refund of its own
    # (ordering/payments/capture_refunds.py), never the one a cancel of the order refunds
    # db_default: the release before it inserts payments without it (docs/scaling.md)
    unwanted_capture = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # reconciliation (ordering/payments/due_checks.py): the provider's last answer, when to ask
    # next, and since when asking has gone unanswered
    checked_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    unanswered_since = models.DateTimeField(null=True, blank=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "provider", "provider_txn_id"], name="uniq_payment_provider_txn"
            ),
        ]
        indexes = [
            # reconciliation and its metrics read only the payments the provider may still
            # settle, however many settled ones the table holds
            models.Index(
                fields=["created_at"],
                condition=models.Q(status__in=["pending", "failed", "voided"]),
                name="payment_unsettled_created",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.provider_txn_id}"


def payment_of_record(payments: Sequence[Payment]) -> Payment | None:
    """Of an order's payments, newest first (``Payment.Meta.ordering``), the one that took its
    money (succeeded, or refunded since) if one did, else the newest. An order paid again
    after a declined card holds several; when a success came for the declined one after all,
    the newer one was voided, and this is the one that paid: the one its answer shows and its
    refund returns. An unwanted capture, refunded on its own, never paid the order."""
    taken = (Payment.Status.SUCCEEDED, Payment.Status.REFUNDED)
    return next(
        (p for p in payments if p.status in taken and not p.unwanted_capture),
        payments[0] if payments else None,
    )
