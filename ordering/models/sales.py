"""Paid sales per tenant and day: the read model the ``order.paid`` consumer and the cancel
saga's refund maintain.

A sale counts on the day it was paid, in the tenant's time zone; its refund, if the order is
cancelled, on the day the money went back (``refunded_orders``, ``refunds``), so a day already
reported does not change and the day's net is ``revenue - refunds``. The counters are
incremented, not recomputed, so a double-processed event would show as a double count:
:class:`~ordering.models.ProcessedEvent` keeps the sales exact, the refund step's compensation
row the refunds.
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
    # Room for a day of ten million orders at an order's largest amount (9,999,999,999.99:
    # ordering.services.placing.MAX_ORDER_AMOUNT): with 14 digits, a hundred such orders
    # overflowed the day's sum, and every later sale of that day failed its consumer.
    revenue = models.DecimalField(max_digits=20, decimal_places=2, default=Decimal("0.00"))
    # db_default: the release before these columns inserts days without them (docs/scaling.md)
    refunded_orders = models.PositiveIntegerField(default=0, db_default=0)
    refunds = models.DecimalField(
        max_digits=20, decimal_places=2, default=Decimal("0.00"), db_default=Decimal("0.00")
    )

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
        return (
            f"{self.day}: {self.paid_orders} paid, {self.revenue} {self.currency}; "
            f"{self.refunded_orders} refunded, {self.refunds} {self.currency}"
        )
