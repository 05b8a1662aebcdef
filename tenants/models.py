"""Tenants (merchant organisations), their members, the API clients of their apps, and the
sessions of their diners."""

from __future__ import annotations

import uuid
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.deletion import Collector
from django.db.models.functions import Lower, Now

from tenants.data_protection import (
    validate_audit_retention_days,
    validate_log_fields,
    validate_record_ttl_hours,
    validate_redaction_paths,
)


def platform_time_zone() -> str:
    """A new tenant's time zone: the platform's (``settings.TIME_ZONE``)."""
    return settings.TIME_ZONE


# Names the zone database holds that are no zone of their own: "localtime" is the host's
# /etc/localtime, so each server would keep the tenant's day (and restart its order numbers)
# at its own midnight.
HOST_ZONE_ALIASES = frozenset({"localtime"})


def validate_time_zone(name: str) -> None:
    if name in HOST_ZONE_ALIASES or name not in available_timezones():
        raise ValidationError(f"{name!r} is not an IANA time zone (e.g. Europe/Rome)")


class Tenant(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"
        # For good: its offboarding has begun, and its rows are fenced (tenants/write_fence.py)
        OFFBOARDING = "offboarding", "Offboarding"

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    region = models.CharField(max_length=32, default="default")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    write_rate_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="API writes per minute per principal (a diner, or a secret server key); empty: "
        "the platform default (settings.IDEMPOTENCY['RATE_LIMIT_PER_MINUTE']).",
    )
    write_ceiling_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="API writes per minute of the whole tenant, all principals together; empty: the "
        "platform default (settings.IDEMPOTENCY['RATE_LIMIT_TENANT_CEILING_PER_MINUTE']).",
    )
    token_quota = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Most pre-issued idempotency tokens outstanding (issued, neither used nor "
        "expired) at once; empty: the platform default (settings.IDEMPOTENCY['TOKEN_QUOTA']).",
    )
    # db_default: the release before these columns inserts tenants without them
    # (docs/scaling.md); its tenants' times were UTC's, as migration 0004 made its rows'.
    time_zone = models.CharField(
        max_length=64,
        default=platform_time_zone,
        db_default="UTC",
        validators=[validate_time_zone],
        help_text="IANA name, e.g. Europe/Rome: the dashboard shows times, and order numbers "
        "restart each day, in this zone.",
    )
    redacted_paths = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        validators=[validate_redaction_paths],
        help_text="JSON paths never kept in a stored reply, besides each endpoint's own, e.g. "
        '["note"]: replays answer null there, with an Idempotency-Redacted header.',
    )
    record_ttl_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[validate_record_ttl_hours],
        help_text="Hours a finished write replays (and its stored reply is kept) for retries; "
        "empty: the platform default (72). Applies to writes made after the change.",
    )
    audit_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[validate_audit_retention_days],
        help_text="Days duplicate-hit audits are kept; empty: the platform default "
        "(settings.IDEMPOTENCY['AUDIT_RETENTION_DAYS'], 30).",
    )
    log_fields = models.JSONField(
        null=True,
        blank=True,
        validators=[validate_log_fields],
        help_text="Which optional fields the logs of this tenant's requests keep, e.g. "
        '["request_id"]; empty (null): all of settings.LOG_FIELDS_TENANT_MAY_KEEP.',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            # two restaurants a person could not tell apart by their slug (commands, URLs,
            # archives are named by it): refused by the database, whoever writes them
            models.UniqueConstraint(
                Lower("slug"),
                name="uniq_tenant_slug_ignoring_case",
                violation_error_message="A tenant with this slug, in other letter case, exists.",
            ),
        ]

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


def write_ceiling_per_minute_of(tenant_key: str) -> int | None:
    """The tenant's own write ceiling, or None for the platform default (the engine's
    ``RATE_LIMIT_CEILING_FOR_TENANT``, cached like the rate)."""
    return (
        Tenant.objects.filter(pk=tenant_key)
        .values_list("write_ceiling_per_minute", flat=True)
        .first()
    )


def token_quota_of(tenant_key: str) -> int | None:
    """The tenant's own quota of outstanding tokens, or None for the platform default (the
    engine's ``TOKEN_QUOTA_FOR_TENANT``)."""
    return Tenant.objects.filter(pk=tenant_key).values_list("token_quota", flat=True).first()


def redacted_paths_of(tenant_key: str) -> list[str]:
    """The JSON paths the tenant redacts on every endpoint (the engine's
    ``REDACT_FOR_TENANT``, cached per process for ``TENANT_POLICY_CACHE_SECONDS``)."""
    return (
        Tenant.objects.filter(pk=tenant_key).values_list("redacted_paths", flat=True).first() or []
    )


def record_ttl_seconds_of(tenant_key: str) -> int | None:
    """The tenant's replay retention in seconds, within the platform's bounds as they are now,
    or None for the default (the engine's ``RECORD_TTL_FOR_TENANT``)."""
    hours = Tenant.objects.filter(pk=tenant_key).values_list("record_ttl_hours", flat=True).first()
    if not hours:
        return None
    low, high = settings.RETENTION_RECORD_TTL_HOURS_MIN, settings.RETENTION_RECORD_TTL_HOURS_MAX
    return _within_bounds(hours, low=low, high=high) * 3600


def audit_retention_overrides() -> dict[str, int]:
    """``{tenant_key: days}`` of the tenants with their own audit retention, within the
    platform's bounds as they are now (the engine's ``AUDIT_RETENTION_OVERRIDES``, read once
    per purge)."""
    rows = Tenant.objects.filter(audit_retention_days__isnull=False)
    low, high = settings.RETENTION_AUDIT_DAYS_MIN, settings.RETENTION_AUDIT_DAYS_MAX
    return {
        str(pk): _within_bounds(days, low=low, high=high)
        for pk, days in rows.values_list("pk", "audit_retention_days")
    }


def _within_bounds(value: int, *, low: int, high: int) -> int:
    """A tenant's retention as the platform's bounds allow it today. The admin refuses a value
    outside them, but bounds narrowed later (a shorter legal maximum) left a value chosen
    before in force: that tenant's audits and replies were kept past the platform's maximum."""
    return min(max(value, low), high)


class RetentionTally(models.Model):
    """Rows the retention purge deleted, per kind, since the beginning: the counter
    ``retention_purged_rows_total`` of /metrics, true whichever process purged (it is
    incremented in each batch's own transaction)."""

    kind = models.CharField(max_length=32, primary_key=True)
    rows_purged = models.BigIntegerField(default=0)
    last_purge_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind}: {self.rows_purged}"


class PasswordToReplace(models.Model):
    """An account whose password was set by someone other than its holder (platform staff in the
    admin, or the operator after ``onboard_tenant``): that person knows it, so it only lets its
    holder in to choose their own (``tenants/temporary_passwords.py``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    since = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"password of user {self.user_id} to replace"


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


def issuer_deleted(
    collector: Collector, field: models.Field, sub_objs: models.QuerySet, using: str
) -> None:
    """``on_delete`` of a key's issuer: ``SET_NULL``, and the key remembers that its issuer's
    account was deleted (``ApiClient.issuer_gone``), so the keys page still marks a live secret
    key that the deleted account saw in full; a key a command issued never had an issuer."""
    models.SET_NULL(collector, field, sub_objs, using)
    collector.add_field_update(field.model._meta.get_field("issuer_gone"), True, sub_objs)


class ApiClient(models.Model):
    """An API key of one tenant. The secret is stored only as a SHA-256 hash.

    A key reads ``<prefix>.<secret>``: the prefix finds the row, the secret is compared against
    its hash in constant time. Secrets are 256-bit random, so a fast hash is enough (there is
    nothing to brute-force as with passwords).

    A **publishable** key ships inside a diner app and is therefore public: it reads the menu
    and opens guest diner sessions, nothing else. A **merchant** key is a secret server key of
    the restaurant's own backend. What each may do is written in ``tenants.permissions``.
    """

    class Kind(models.TextChoices):
        PUBLISHABLE = "publishable", "Publishable (diner app)"
        MERCHANT = "merchant", "Secret (merchant server)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_clients")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PUBLISHABLE)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    is_test = models.BooleanField(default=False, help_text="Test clients may pin engine versions.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Who saw the full key when it was issued (the dashboard's member; none for a key a
    # command issued): a key outlives its issuer's membership, so the owners left can tell
    # which secret keys someone who has left still knows (``tenants.key_issuers``).
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=issuer_deleted,
        related_name="+",
    )
    # Set when the issuer's account is deleted: ``issued_by`` then reads NULL, as a command's
    # key does, though someone saw this key in full and has left (``tenants.key_issuers``).
    # db_default: the release before this column inserts keys without it.
    issuer_gone = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["tenant", "name"]

    def __str__(self) -> str:
        return f"{self.tenant}:{self.name} ({self.prefix})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class DinerSession(models.Model):
    """One signed-in diner on one device: what a ``Bearer`` token stands for.

    The token itself is never stored: it is signed (``tenants.diner_sessions``) and carries a
    random secret of which only the SHA-256 is kept here, so a copy of this table opens no
    session. ``client`` is the API key that opened it: revoking that key ends the guest
    sessions it opened. ``expires_at`` is the latest expiry a token of this session was issued
    with (a refresh moves it); each token also carries its own, signed.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="diner_sessions")
    diner_id = models.CharField(max_length=64)
    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="diner_sessions")
    is_guest = models.BooleanField(default=False)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "diner_id"], name="diner_session_tenant_diner"),
            models.Index(fields=["expires_at"], name="diner_session_expires"),
        ]

    def __str__(self) -> str:
        # no diner id: the admin's action log keeps this text after the diner is erased
        return f"diner session {self.pk}"
