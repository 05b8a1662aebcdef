"""Diner sessions' revocation state: the one lookup a Bearer request costs, cached.

Signature and expiry are checked by arithmetic (:func:`tenants.diner_sessions.read_token`);
what arithmetic cannot know is whether the session, or the API key that opened it, was revoked
since. That answer is read from the database through :mod:`tenants.credential_cache`: at most
once a minute per session per process while the process hears the credential feed, once a
second when it does not; every revocation reaches every process within 1 s either way. Nothing
here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from tenants import credential_cache
from tenants.models import ApiClient, DinerSession, Tenant


@dataclass(frozen=True)
class SessionState:
    tenant: Tenant
    client: ApiClient
    diner_id: str
    secret_hash: str
    active: bool  # neither the session nor the key that opened it is revoked


def _load(session_id: UUID) -> SessionState | None:
    session = DinerSession.objects.select_related("tenant", "client").filter(pk=session_id).first()
    if session is None:
        return None
    return SessionState(
        tenant=session.tenant,
        client=session.client,
        diner_id=session.diner_id,
        secret_hash=session.secret_hash,
        active=session.revoked_at is None and session.client.revoked_at is None,
    )


def session_state(session_id: UUID) -> SessionState | None:
    """The session's state, as trusted as :mod:`tenants.credential_cache` says; None if no
    such session exists."""
    return credential_cache.cached(
        credential_cache.session_key(session_id), lambda: _load(session_id)
    )


def forget(session_id: UUID) -> None:
    """The session changed: every process reads it afresh (this one at once)."""
    credential_cache.announce(credential_cache.session_key(session_id))


def clear() -> None:
    """Forget every entry in this process (tests)."""
    credential_cache.clear()
