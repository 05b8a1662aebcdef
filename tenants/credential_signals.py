"""Saving a tenant, an API key or a diner session announces it on the credential feed.

The services announce the changes they make with ``UPDATE`` (revocations); these receivers
catch every ``save()`` (the admin, the dashboard, a shell), so a suspended tenant or an edited
key is read afresh by every process within 1 s (:mod:`tenants.credential_cache`).
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from tenants import credential_cache
from tenants.models import ApiClient, DinerSession, Tenant


@receiver([post_save, post_delete], sender=Tenant)
@receiver([post_save, post_delete], sender=ApiClient)
def _tenant_or_key_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created:  # nothing can have cached a row that did not exist
        credential_cache.announce(credential_cache.EVERYTHING)


@receiver([post_save, post_delete], sender=DinerSession)
def _session_saved(
    sender: Any, instance: DinerSession, created: bool = False, **kwargs: Any
) -> None:
    if not created:
        credential_cache.announce(credential_cache.session_key(instance.pk))
