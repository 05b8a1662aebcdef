"""Tenants (merchant organisations), their members, and the API clients of their apps."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models


def platform_time_zone() -> str:
    """A new tenant's time zone: the platform's (``settings.TIME_ZONE``)."""
    return settings.TIME_ZONE


def validate_time_zone(name: str) -> None:
    if name not in available_timezones():
        raise ValidationError(f"{name!r} is not an IANA time zone (e.g. Europe/Rome)")


class Tenant(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    region = models.CharField(max_length=32, default="default")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    write_rate_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="API writes per minute per API client and diner; empty: the platform default "
        "(settings.IDEMPOTENCY['RATE_LIMIT_PER_MINUTE']).",
    )
    time_zone = models.CharField(
        max_length=64,
        default=platform_time_zone,
        validators=[validate_time_zone],
        help_text="IANA name, e.g. Europe/Rome: the dashboard shows times, and order numbers "
        "restart each day, in this zone.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE

    @property
    def zone(self) -> ZoneInfo:
        """The tenant's time zone; the platform's if the stored name is unknown here (a zone
        database older than the one that validated it)."""
        try:
            return ZoneInfo(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo(settings.TIME_ZONE)


def write_rate_per_minute_of(tenant_key: str) -> int | None:
    """The tenant's own write rate, or None for the platform default. The idempotency engine's
    ``RATE_LIMIT_FOR_TENANT``: it knows tenants only by key, and caches the answer briefly."""
    return (
        Tenant.objects.filter(pk=tenant_key).values_list("write_rate_per_minute", flat=True).first()
    )


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MANAGER = "manager", "Manager"
        STAFF = "staff", "Staff"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STAFF)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="uniq_membership_tenant_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class ApiClient(models.Model):
    """An API key of one tenant's app. The secret is stored only as a SHA-256 hash.

    A key reads ``<prefix>.<secret>``: the prefix finds the row, the secret is compared against
    its hash in constant time. Secrets are 256-bit random, so a fast hash is enough (there is
    nothing to brute-force as with passwords).
    """

    class Kind(models.TextChoices):
        DINER_APP = "diner_app", "Diner app"
        MERCHANT = "merchant", "Merchant integration"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_clients")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DINER_APP)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    is_test = models.BooleanField(default=False, help_text="Test clients may pin engine versions.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant", "name"]

    def __str__(self) -> str:
        return f"{self.tenant}:{self.name} ({self.prefix})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
