"""Issuing, checking and revoking tenants' API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tenants import credential_cache
from tenants.models import ApiClient, Tenant
from tenants.row_limits import has_room

# last_used_at is a hint for merchants, not an audit trail: refresh it at most this often so
# that every API request does not become a database write.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# The most live API keys a tenant holds (README, API keys): each is a credential every request
# may present and the API keys page lists. Revoked keys do not count: a restaurant at the bound
# must always be able to revoke a leaked key and issue its replacement (counted, a restaurant
# that had rotated its keys fifty times could never issue one again).
MAX_API_KEYS_PER_TENANT = 100


class ApiKeyLimitReached(Exception):
    """The tenant holds ``MAX_API_KEYS_PER_TENANT`` live keys already: none was issued."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_api_key(
    *,
    tenant: Tenant,
    name: str,
    kind: str = ApiClient.Kind.PUBLISHABLE,
    is_test: bool = False,
    issued_by: AbstractBaseUser | None = None,
) -> tuple[ApiClient, str]:
    """Create an API client; return it with the full key, which is shown this one time only
    (to ``issued_by``, the dashboard's member who asked for it).
    Past ``MAX_API_KEYS_PER_TENANT`` live keys, :class:`ApiKeyLimitReached` and nothing
    written, also when issues race for the last places (:func:`tenants.row_limits.has_room`)."""
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        live = ApiClient.objects.filter(tenant=tenant, revoked_at__isnull=True)
        if not has_room(tenant, live, MAX_API_KEYS_PER_TENANT):
            raise ApiKeyLimitReached(
                f"A restaurant holds at most {MAX_API_KEYS_PER_TENANT:,} live API keys, and this "
                "one has them all: revoke a key no longer used (revoked keys do not count), "
                "then issue this one. No key was issued."
            )
        client = ApiClient.objects.create(
            tenant=tenant,
            name=name,
            kind=kind,
            prefix=prefix,
            secret_hash=_hash(secret),
            is_test=is_test,
            issued_by=issued_by,
        )
    return client, f"{prefix}.{secret}"


def authenticate_api_key(raw_key: str) -> ApiClient | None:
    """The active client that ``raw_key`` belongs to, or None (unknown, malformed or revoked).

    The client row is read through :mod:`tenants.credential_cache` (no query per call; a
    revocation reaches every process within 1 s); the secret is checked against its hash on
    every call."""
    prefix, dot, secret = raw_key.partition(".")
    if not dot or not prefix or not secret or len(raw_key) > 200:
        return None
    client = credential_cache.cached(
        credential_cache.api_key_key(prefix),
        lambda: (
            ApiClient.objects.select_related("tenant")
            .filter(prefix=prefix, revoked_at__isnull=True)
            .first()
        ),
    )
    if client is None or not hmac.compare_digest(client.secret_hash, _hash(secret)):
        return None
    now = timezone.now()
    if client.last_used_at is None or now - client.last_used_at > LAST_USED_RESOLUTION:
        ApiClient.objects.filter(pk=client.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        client.last_used_at = now  # the cached copy: this process writes it once a minute
    return client


def revoke_api_key(*, client: ApiClient) -> bool:
    """Revoke a key; requests with it fail from now on, and so do the diner sessions it
    opened (every process within 1 s, :mod:`tenants.credential_cache`). Revoking twice
    changes nothing: False when the key was revoked already (another tab, a colleague)."""
    revoked = ApiClient.objects.filter(pk=client.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    client.refresh_from_db(fields=["revoked_at"])
    credential_cache.announce(credential_cache.EVERYTHING)  # the key and its sessions
    return revoked == 1
