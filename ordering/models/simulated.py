"""The simulated payment provider's and courier service's own books, and their fault plans.

They stand in for systems outside ours, so they behave like well-made ones: every call carries an
idempotency key and a repeated key returns the first result (``calls`` counts how often it was
asked). :class:`FaultPlan` lets a test or a demo make a step fail or hang for one order; only the
simulated adapters read it, so it cannot affect a real provider.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from tenants.models import Tenant


class SimulatedOperation(models.Model):
    class Kind(models.TextChoices):
        REFUND = "refund", "Refund"
        DELIVERY_CANCEL = "delivery_cancel", "Delivery cancellation"
        PAYMENT_SUCCEEDED = "payment_succeeded", "Payment taken from the diner"
        PAYMENT_FAILED = "payment_failed", "Payment declined"

    # None: the platform's own account at the provider, which refunds the payments of a
    # restaurant that left (ordering/payments/departed_refunds.py); not fenced nor deleted
    # with any restaurant, as a real provider's books are not
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    idempotency_key = models.CharField(max_length=200)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    reference = models.CharField(max_length=100, help_text="Transaction or order it applies to")
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    calls = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"], name="uniq_simulated_op_key"
            ),
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=models.Q(tenant__isnull=True),
                name="uniq_simulated_platform_op_key",
            ),
        ]

    def __str__(self) -> str:
        return f"simulated {self.kind} {self.reference} ({self.idempotency_key})"


class FaultPlan(models.Model):
    """For one order and step: fail the next ``fail_times`` calls, then hang the next
    ``delay_times`` calls for ``delay_seconds`` after doing their work."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    order = models.ForeignKey("ordering.Order", on_delete=models.CASCADE, related_name="+")
    step = models.CharField(max_length=32)
    fail_times = models.PositiveIntegerField(default=0)
    delay_times = models.PositiveIntegerField(default=0)
    delay_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "order", "step"], name="uniq_fault_plan_order_step"
            ),
        ]

    def __str__(self) -> str:
        return f"fault plan {self.step} of order {self.order_id}"
