"""What data-protection requests did: erasing a diner, giving a diner a copy of their data,
offboarding a tenant.

:class:`DinerErasure` is the log of one erasure: who asked, when, how much was removed, and the
diner's id only as a keyed hash (:func:`ordering.privacy.diners.diner_hash`), so the log can
answer "was this diner erased?" without keeping the id it erased.

:class:`TenantOffboarding` is the job that removes a whole tenant. It outlives the tenant (no
foreign key) and persists its progress after every bounded batch, so a run interrupted by a
crash or a deploy continues where it stopped when started again.
"""

from __future__ import annotations

from django.db import models

from ordering.actors import shown_requester
from tenants.models import Tenant


class DinerErasure(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    diner_hash = models.CharField(
        max_length=64, db_index=True, help_text="HMAC-SHA256 of the diner id (keyed by the site)"
    )
    pseudonym = models.CharField(
        max_length=64, help_text="What the diner's orders carry instead of the id"
    )
    requested_by = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    counts = models.JSONField(default=dict, blank=True, help_text="What was removed, per kind")
    # the erased id was a guest's (``guest_…``): its orders now carry the pseudonym, and the
    # retention purge still deletes the unpaid cancelled ones (ordering/privacy/guest_orders.py)
    guest = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(
                fields=["tenant", "pseudonym"],
                condition=models.Q(guest=True),
                name="dinererasure_guest_pseudonym",
            ),
        ]

    def __str__(self) -> str:
        return f"erasure {self.pk} of {self.pseudonym} by {self.requested_by}"

    @property
    def shown_requester(self) -> str:
        """Who asked, as the restaurant's Privacy page says it (no staff member's name)."""
        return shown_requester(self.requested_by)


class DinerDataExport(models.Model):
    """The log of one copy of a diner's data given out (a subject access request): who asked
    and when, with the diner id only as the erasure log keeps it (``diner_hash``), so the
    restaurant can show it answered without the log naming the diner to whoever reads it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    diner_hash = models.CharField(
        max_length=64, db_index=True, help_text="HMAC-SHA256 of the diner id (keyed by the site)"
    )
    requested_by = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"diner data export {self.pk} by {self.requested_by}"

    @property
    def shown_requester(self) -> str:
        """Who asked, as the restaurant's Privacy page says it (no staff member's name)."""
        return shown_requester(self.requested_by)


class TenantOffboarding(models.Model):
    class Phase(models.TextChoices):
        SUSPEND = "suspend", "Suspend (keys and sessions stop working)"
        EXPORT = "export", "Export the archive"
        ENGINE = "engine", "Idempotency records and audits"
        REDIS = "redis", "Redis keys on every node"
        TABLES = "tables", "The tenant's rows, table by table"
        TENANT = "tenant", "The tenant itself"
        DONE = "done", "Done"

    tenant_ref = models.BigIntegerField(db_index=True, help_text="The offboarded tenant's id")
    tenant_slug = models.SlugField(max_length=64)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.SUSPEND)
    export_path = models.CharField(max_length=500)
    export_sha256 = models.CharField(max_length=64, blank=True)
    batch_size = models.PositiveIntegerField(default=500)
    batches = models.PositiveIntegerField(default=0, help_text="Batches committed so far")
    counts = models.JSONField(default=dict, blank=True, help_text="Rows and keys removed, per kind")
    requested_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    suspended_at = models.DateTimeField(
        null=True, blank=True, help_text="When its tables were closed (the suspend phase)"
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_ref"],
                condition=~models.Q(phase="done"),
                name="one_open_offboarding_per_tenant",
            ),
        ]

    def __str__(self) -> str:
        return f"offboarding of {self.tenant_slug} ({self.phase})"

    @property
    def is_done(self) -> bool:
        return self.phase == self.Phase.DONE
