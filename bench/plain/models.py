"""The one small table the bare create writes to."""

from __future__ import annotations

from django.db import models


class PlainRecord(models.Model):
    name = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    note = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return self.name
