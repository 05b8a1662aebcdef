"""The transactional outbox and the consumers' inbox (DESIGN §3 layer 4, seed 4.4).

An :class:`OutboxEvent` is written in the same transaction as the state change it announces, so
it exists exactly when the change committed; it is published after the commit and, if that
publish was lost (crash, broker down), by the periodic sweeper. Delivery is therefore at least
once. A consumer records each event it handled as a :class:`ProcessedEvent` in the same
transaction as its effect; ``unique(tenant, order, event_type, version)`` makes a second
delivery of the same event a no-op.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import ExpressionWrapper
from django.db.models.expressions import Combinable
from django.db.models.functions import Now

from tenants.models import Tenant
from tenants.scoping import TenantManager


class EventType(models.TextChoices):
    ORDER_PAID = "order.paid", "Order paid"
    CANCEL_REQUESTED = "order.cancel_requested", "Cancel requested (refund saga)"


# the longest wait between two sends of an event no consumer has finished with
_REDELIVER_MAX_SECONDS = 86400.0


class OutboxEvent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(
        "ordering.Order", on_delete=models.PROTECT, related_name="outbox_events"
    )
    event_type = models.CharField(max_length=64, choices=EventType.choices)
    version = models.PositiveIntegerField(
        help_text="The order's state version (its number of transitions) when this was written"
    )
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    published_at = models.DateTimeField(null=True, blank=True)
    publish_attempts = models.PositiveIntegerField(default=0)
    # the last send, or when a retry the consumer asked for is due (the broker holds it until
    # then): the sweeper sends a message again only well after this
    last_publish_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # when a consumer finished with it (done, a duplicate, skipped or dead-lettered): a message
    # the broker accepted and then lost (Redis restarted empty) leaves this empty, and the
    # sweeper sends it again (ordering/background/outbox.py)
    consumed_at = models.DateTimeField(null=True, blank=True)
    # when the sweeper sends it again if no consumer has finished with it by then: set by each
    # send, twice as far off as the one before (empty until published, or redelivery off)
    resend_at = models.DateTimeField(null=True, blank=True)

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "order", "event_type", "version"], name="uniq_outbox_event"
            ),
        ]
        indexes = [
            # The sweeper's scan: only unpublished rows, oldest first.
            models.Index(
                fields=["created_at"],
                condition=models.Q(published_at__isnull=True),
                name="outbox_unpublished_idx",
            ),
            # The redelivery scan: only rows not yet consumed, the soonest due first.
            models.Index(
                fields=["resend_at"],
                condition=models.Q(consumed_at__isnull=True, resend_at__isnull=False),
                name="outbox_resend_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} v{self.version} of order {self.order_id}"

    @staticmethod
    def resend_after(
        *, sends: int, waiting_from: datetime | None = None, delay_seconds: float = 0
    ) -> datetime | Combinable | None:
        """When an event sent ``sends`` times, the last at ``waiting_from`` (now, or
        ``delay_seconds`` from now), is sent again if no consumer has finished with it:
        ``OUTBOX_REDELIVER_AFTER_SECONDS`` later, doubled for each send before the last, at
        most a day, so a queue merely waiting for a worker is not flooded with copies. None
        when redelivery is off (the setting at 0).

        Without ``waiting_from`` it is an expression of the database's clock (``now()``), for
        an ``UPDATE``: the sweep reads ``resend_at <= now()`` there, and a time taken from
        this host's clock, minutes behind the database's, was already due when written."""
        after = settings.OUTBOX_REDELIVER_AFTER_SECONDS
        if after <= 0:
            return None
        wait = timedelta(seconds=min(after * 2 ** max(sends - 1, 0), _REDELIVER_MAX_SECONDS))
        if waiting_from is not None:
            return waiting_from + timedelta(seconds=delay_seconds) + wait
        return ExpressionWrapper(
            Now() + (wait + timedelta(seconds=delay_seconds)), output_field=models.DateTimeField()
        )


class ProcessedEvent(models.Model):
    """An event a consumer has handled; its effect was committed in the same transaction."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey("ordering.Order", on_delete=models.PROTECT, related_name="+")
    event_type = models.CharField(max_length=64, choices=EventType.choices)
    version = models.PositiveIntegerField()
    event = models.ForeignKey(
        OutboxEvent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    processed_at = models.DateTimeField(auto_now_add=True)
    duplicates = models.PositiveIntegerField(
        default=0, help_text="Later deliveries of the same event, absorbed without effect"
    )

    all_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        ordering = ["-processed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "order", "event_type", "version"],
                name="uniq_processed_event",
            ),
        ]

    def __str__(self) -> str:
        return f"processed {self.event_type} v{self.version} of order {self.order_id}"
