"""What a tenant sells: dishes with stock, and coupons with usage limits."""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantManager

# The most portions a dish can have on the menu (the dashboard's and the admin's forms): far
# above any kitchen's day, and far below the column's range, which portions given back by
# cancels must never overflow.
MAX_STOCK = 1_000_000


MAX_DESCRIPTION_CHARS = 2000


class Dish(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="dishes")
    name = models.CharField(max_length=200)
    # bounded like every stored input: a menu page carried a 900,000-character description
    description = models.CharField(max_length=MAX_DESCRIPTION_CHARS, blank=True)
    price = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.00"))]
    )
    stock = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(MAX_STOCK)])
    active = models.BooleanField(default=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["tenant", "name"]
        verbose_name_plural = "dishes"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_dish_tenant_name"),
            models.CheckConstraint(
                condition=models.Q(price__gte=0), name="dish_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.name


def validate_coupon_end(value: datetime) -> None:
    """A coupon's end in the years 2000 to 2999: a date near the calendar's ends cannot be
    shown in every restaurant's time zone (the coupons page would fail on it)."""
    if not 2000 <= value.year <= 2999:
        raise ValidationError("Valid until must be in the years 2000 to 2999.")


class Coupon(models.Model):
    class Kind(models.TextChoices):
        AMOUNT = "amount", "Fixed amount off"
        PERCENT = "percent", "Percent off"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="coupons")
    code = models.CharField(max_length=40)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    value = models.DecimalField(max_digits=10, decimal_places=2)
    max_uses = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: unlimited")
    used_count = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True)
    valid_until = models.DateTimeField(null=True, blank=True, validators=[validate_coupon_end])

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["tenant", "code"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "code"], name="uniq_coupon_tenant_code"),
            models.CheckConstraint(condition=models.Q(value__gt=0), name="coupon_value_positive"),
            models.CheckConstraint(
                condition=~models.Q(kind="percent") | models.Q(value__lte=100),
                name="coupon_percent_at_most_100",
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def discount_for(self, subtotal: Decimal) -> Decimal:
        """The discount on ``subtotal``, never more than the subtotal itself. A percentage is
        rounded to the cent half up, as a till or a calculator does (10 % of 19.05 is 1.91):
        Python's default, half to even, took 1.90 off, a cent less than the diner was told."""
        if self.kind == self.Kind.PERCENT:
            share = subtotal * self.value / Decimal(100)
            discount = share.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        else:
            discount = self.value
        return min(discount, subtotal)
