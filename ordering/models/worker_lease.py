"""Which process holds which order-ID worker id, when leases live in the database.

Used when Redis is not configured, or was unreachable when the process leased its id (see
:mod:`ordering.worker_ids`). One row per worker id, kept after it lapses: the next claimer takes it
over with a conditional ``UPDATE``, so the table never grows past 128 rows.
"""

from __future__ import annotations

from django.db import models


class WorkerLease(models.Model):
    # The primary key is the worker id itself: the database's uniqueness check is what decides
    # which of two processes inserting the same id at the same time gets it.
    worker_id = models.PositiveSmallIntegerField(primary_key=True)
    owner = models.CharField(max_length=255, help_text="host:pid:random of the holding process")
    expires_at = models.DateTimeField(help_text="Free for anyone to take after this instant")
    heartbeat_at = models.DateTimeField(help_text="Last claim or renewal by the owner")

    class Meta:
        app_label = "ordering"
        ordering = ["worker_id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(worker_id__lte=127), name="worker_lease_id_at_most_127"
            ),
        ]

    def __str__(self) -> str:
        return f"worker id {self.worker_id} held by {self.owner} until {self.expires_at}"
