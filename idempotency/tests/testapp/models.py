from django.db import models


class Note(models.Model):
    """One executed write: the contract counts these."""

    tenant = models.CharField(max_length=64, default="")
    principal = models.CharField(max_length=64, default="")
    text = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.text
