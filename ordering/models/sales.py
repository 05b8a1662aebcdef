"""Paid sales per tenant and day: the read model the ``order.paid`` consumer maintains.

Its counters are incremented, not recomputed, so a double-processed event would show as a
double count; :class:`~ordering.models.ProcessedEvent` is what keeps it exact.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantManager


class SalesDay(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    currency = models.CharField(max_length=3)
    paid_orders = models.PositiveIntegerField(default=0)
    revenue = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal("0.00"))

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-day"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "day", "currency"], name="uniq_sales_day_tenant_currency"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day}: {self.paid_orders} paid, {self.revenue} {self.currency}"
