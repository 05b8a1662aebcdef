"""The last short order number handed out, per tenant and business day."""

from __future__ import annotations

from django.db import models

from tenants.models import Tenant


class OrderNumberCounter(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    day = models.DateField(help_text="Business day in the tenant's time zone")
    last = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "day"], name="uniq_order_counter_day"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day}: {self.last}"
