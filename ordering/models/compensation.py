"""Saga bookkeeping: one row per compensation step, and dead letters for staff.

A :class:`Compensation` is keyed by its ``compensation_id`` (``cancel:<order>:<step>`` for a
step of the cancel saga, ``refund-capture:<payment>`` for money no order wanted), unique,
so a step's effect is applied by exactly one conditional ``UPDATE ... WHERE status <> 'done'``
and never twice, whoever retries or redelivers. External calls carry the same id as their
idempotency key, so a provider that saw the call before a crash answers with the first result.

A :class:`DeadLetter` is what a message turns into after its last retry failed: the payload to
send again, the error, how many attempts were made, and when. Staff requeue or discard it
(``ordering.background.dead_letters``); while one is open for an order, that order is flagged.
"""

from __future__ import annotations

from django.db import models

from tenants.models import Tenant
from tenants.scoping import TenantManager


class Compensation(models.Model):
    class Step(models.TextChoices):
        RESTORE_STOCK = "restore_stock", "Restore stock"
        RETURN_COUPON = "return_coupon", "Return coupon"
        CANCEL_DELIVERY = "cancel_delivery", "Cancel delivery"
        REFUND_PAYMENT = "refund_payment", "Refund payment"
        REFUND_CAPTURE = "refund_capture", "Refund money taken that no order wanted"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"
        FAILED = "failed", "Failed (dead-lettered)"

    compensation_id = models.CharField(max_length=100)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(
        "ordering.Order", on_delete=models.PROTECT, related_name="compensations"
    )
    step = models.CharField(max_length=32, choices=Step.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    done_at = models.DateTimeField(null=True, blank=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["order_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["compensation_id"], name="uniq_compensation_id"),
        ]
        indexes = [
            # the sweep of capture refunds whose message was lost reads only the pending ones
            models.Index(
                fields=["updated_at"],
                condition=models.Q(step="refund_capture", status="pending"),
                name="compensation_capture_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.compensation_id} ({self.status})"


class DeadLetter(models.Model):
    class State(models.TextChoices):
        OPEN = "open", "Open"
        REQUEUED = "requeued", "Requeued"
        DISCARDED = "discarded", "Discarded"

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    order = models.ForeignKey(
        "ordering.Order",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="dead_letters",
    )
    key = models.CharField(
        max_length=200, help_text="What failed, e.g. the compensation id; one open letter per key"
    )
    task = models.CharField(max_length=200)
    payload = models.JSONField(help_text="Task arguments, sent again by a requeue")
    error = models.TextField()
    attempts = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["key"],
                condition=models.Q(state="open"),
                name="uniq_open_dead_letter_key",
            ),
        ]

    def __str__(self) -> str:
        return f"dead letter {self.pk}: {self.key} ({self.state})"
