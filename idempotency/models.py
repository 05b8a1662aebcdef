"""Durable idempotency records (the truth, seed 4.3) and duplicate-hit audits (seed ch. 5).

The engine knows tenants only as an opaque string (``tenant_key``) so it stays reusable: the
host application decides what a tenant is.
"""

from __future__ import annotations

from django.db import models


class IdempotencyRecord(models.Model):
    """The committed result of one idempotent request.

    Inserted in the same transaction as the business write, so it exists exactly when the write
    does. ``unique(tenant_key, scope, key)`` lets the database decide between duplicates.
    ``key`` is the client key's digest (``keys.key_digest``), the one its Redis key ends with,
    so purge and erasure can rebuild that Redis key while the raw key is kept nowhere.
    """

    tenant_key = models.CharField(max_length=64)
    scope = models.CharField(max_length=255, help_text="principal · method · route")
    key = models.CharField(
        max_length=255, help_text="key_digest() of the client's key: the raw key is not kept"
    )
    fingerprint = models.CharField(max_length=64)
    fingerprint_version = models.PositiveSmallIntegerField(default=1)
    field_hashes = models.JSONField(default=dict, blank=True)
    response_status = models.PositiveSmallIntegerField()
    response_headers = models.JSONField(default=list, blank=True)
    response_body = models.BinaryField(blank=True, default=b"")
    resource_location = models.CharField(
        max_length=500, blank=True, help_text="Set when the body was too large to keep."
    )
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_key", "scope", "key"], name="uniq_idem_tenant_scope_key"
            )
        ]
        permissions = [
            ("view_stored_body", "Can see the response bodies stored for replays"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_key}:{self.scope}:{self.key}"


class DuplicateAudit(models.Model):
    """One absorbed duplicate (or refused reuse) for staff to review."""

    class Outcome(models.TextChoices):
        HIT = "HIT", "Replayed"
        IN_PROGRESS = "IN_PROGRESS", "In progress"
        REUSED = "REUSED", "Key reused with another payload"
        CONFLICT = "CONFLICT", "Conflict"

    tenant_key = models.CharField(max_length=64, db_index=True)
    endpoint = models.CharField(max_length=255, db_index=True)
    key = models.CharField(max_length=255, db_index=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, db_index=True)
    source = models.CharField(max_length=16, blank=True, help_text="local, redis or database")
    principal = models.CharField(max_length=255, blank=True)
    differing_fields = models.JSONField(default=list, blank=True)
    request_meta = models.JSONField(default=dict, blank=True)
    resource_ref = models.CharField(max_length=100, blank=True, db_index=True)
    at = models.DateTimeField(db_index=True)
    reviewed = models.BooleanField(default=False)
    reviewed_by = models.CharField(max_length=150, blank=True)
    resolution_note = models.TextField(blank=True)
    # The reporting request's id for this event: an event sent twice (a client library re-sends
    # an XADD whose reply was lost, or a fallback write of an append that did land) is one row.
    # NULL for rows written before ids existed: unique constraints let NULLs repeat, "" not.
    event_id = models.CharField(max_length=32, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            # led by the tenant, as every unique key of a tenant's table (docs/scaling.md)
            models.UniqueConstraint(fields=["tenant_key", "event_id"], name="uniq_audit_event")
        ]
        indexes = [
            # one principal's audits (a diner's copy of their data, an erasure): by the tenant
            # alone, every audit the tenant keeps (up to 365 days) was read to find them
            models.Index(fields=["tenant_key", "principal"], name="audit_tenant_principal"),
            # a tenant's newest audits of some outcomes (the host's page of replays and
            # refusals, ``reports.latest_audits``): by time alone, every tenant's audits were
            # walked, all of them for a tenant with none of an outcome
            models.Index(
                fields=["tenant_key", "outcome", "-at", "-id"], name="audit_tenant_outcome_at"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} {self.endpoint} {self.key}"


MISS = "MISS"
"""A first execution: counted in ``OutcomeCount``, never an audit row (it is no duplicate)."""


class OutcomeCount(models.Model):
    """How many requests of one tenant and endpoint ended with one outcome in one hour.

    Every outcome is counted, first executions (MISS) included, so a hit rate is computed from
    complete numbers rather than from the audits alone. Rows are added to in batches
    (``idempotency.audit.storage.save_events``), never one request at a time on a hot path.
    A row goes once its hour ended as long ago as its tenant keeps audits
    (:func:`idempotency.purge.expired_outcome_counts`).
    """

    tenant_key = models.CharField(max_length=64)
    endpoint = models.CharField(max_length=255)
    outcome = models.CharField(max_length=16)
    hour = models.DateTimeField(help_text="Start of the hour (UTC)")
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_key", "endpoint", "outcome", "hour"], name="uniq_outcome_count"
            )
        ]
        indexes = [
            models.Index(fields=["tenant_key", "hour"], name="outcome_count_tenant_hour"),
            # the retention purge and its overdue gauge look for old hours across tenants
            models.Index(fields=["hour"], name="outcome_count_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_key} {self.endpoint} {self.outcome} {self.hour:%Y-%m-%d %H}h"


class AuditStreamCursor(models.Model):
    """How far the audit stream of one Redis node has been copied into the database.

    Advanced in the same transaction that writes the copied entries, so an entry read twice
    (a drain that died after its commit, before it trimmed the stream) is skipped, never
    written twice.
    """

    stream = models.CharField(max_length=255, unique=True, help_text="node name · stream key")
    last_id = models.CharField(max_length=41, default="0-0")
    drained_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.stream} @ {self.last_id}"


class StaffAccessLog(models.Model):
    """Who looked at what personal data in the admin, and when: each view of a stored reply
    body, of an audit's request details (the client's address and user agent) and each export
    of audits is one row (read-only evidence, never edited). The host logs its own pages of
    personal data here too (``VIEW_PERSONAL_DATA``, with their model)."""

    class Action(models.TextChoices):
        VIEW_STORED_BODY = "view_stored_body", "Viewed a stored reply body"
        VIEW_REQUEST_DETAILS = (
            "view_request_details",
            "Viewed an audit's request details (client address, user agent)",
        )
        EXPORT_AUDITS = "export_audits", "Exported duplicate audits (CSV)"
        VIEW_PERSONAL_DATA = "view_personal_data", "Viewed personal data (the host's pages)"

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=32, choices=Action.choices)
    object_type = models.CharField(max_length=100)
    object_ids = models.JSONField(default=list, blank=True, help_text="At most 1,000 ids")
    row_count = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            # the admin's search by who looked (the log is kept for good)
            models.Index(fields=["actor"], name="staff_access_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type} ({self.row_count})"


class LuaScriptVersion(models.Model):
    """One version of one of the engine's Lua scripts (claim, finish or release).

    Lifecycle: draft → canary (a share of tenants) → stable → retired. At most one canary and
    one stable version per script name; ``idempotency.scripts.registry`` decides which version a
    call uses, and running processes learn about changes through Redis pub/sub.
    """

    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        CANARY = "canary", "Canary"
        STABLE = "stable", "Stable"
        RETIRED = "retired", "Retired"

    name = models.CharField(max_length=32)
    version = models.PositiveIntegerField()
    source = models.TextField()
    sha256 = models.CharField(max_length=64)
    redis_sha1 = models.CharField(max_length=40, help_text="What EVALSHA calls it")
    author = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.DRAFT)
    canary_percent = models.PositiveSmallIntegerField(default=0)
    canary_tenants = models.JSONField(default=list, blank=True)
    canary_regions = models.JSONField(default=list, blank=True)
    contract_passed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="uniq_lua_name_version"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(state="stable"), name="one_stable_lua_per_name"
            ),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(state="canary"), name="one_canary_lua_per_name"
            ),
            models.CheckConstraint(
                condition=models.Q(canary_percent__lte=100), name="lua_canary_percent_at_most_100"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} ({self.state})"


class LuaScriptChange(models.Model):
    """Audit of every change to a script version: who did what, when."""

    script = models.ForeignKey(LuaScriptVersion, on_delete=models.CASCADE, related_name="changes")
    action = models.CharField(max_length=32)
    author = models.CharField(max_length=150)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.script} by {self.author}"
