"""Diner sessions: the short-lived, revocable credential a diner's app acts with.

A publishable key (public: it ships in the app) opens a **guest** session for a new diner id
made here; a merchant's secret key **signs in** a diner its own backend has authenticated. Either
way the app gets a token for ``Authorization: Bearer <token>``:

- The token is signed (Django's ``signing`` with SHA-256 under a key derived from
  ``SECRET_KEY``; ``SECRET_KEY_FALLBACKS`` still verify during a rotation) and carries the
  tenant, the session id, the diner, the expiry and a random secret. Forged, mangled and
  expired tokens are refused by arithmetic alone, before any lookup.
- The database keeps the session (``DinerSession``) with only the SHA-256 of that secret: a
  copy of the table opens no session, and the signing key alone does not either.
- Revocation (of the session, of its diner, or of the API key that opened it) is read through
  :mod:`tenants.session_state`, a per-process cache that every revocation reaches within 1 s
  (:mod:`tenants.credential_cache`): verifying a token costs no database round trip in the
  common case and never a write.
- A refresh issues a token with a later expiry for the same session and secret, so a client
  that lost the refresh answer can refresh again with the old token; the session's
  ``DINER_SESSION_MAX_AGE_SECONDS`` (30 days) bounds how far refreshes go.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from uuid import UUID

from django.conf import settings
from django.core import signing
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import timezone

from tenants.models import ApiClient, DinerSession, Tenant
from tenants.session_state import SessionState, forget, session_state

# Diner ids a merchant backend may name; "guest_" and "erased-" are reserved for ids made
# here: guests', and the pseudonyms an erasure leaves on a diner's orders.
DINER_ID_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
GUEST_PREFIX = "guest_"
ERASED_PREFIX = "erased-"
MAX_TOKEN_LENGTH = 512
_SALT = "tenants.diner_sessions"


class SessionRefused(Exception):
    """A token that opens nothing; ``code`` says why (a ``TenantErrorCode`` value)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class SessionClaims:
    """What a token says, once its signature and expiry are checked."""

    tenant_id: int
    session_id: UUID
    diner_id: str
    expires_at: int  # Unix seconds
    secret: str


@dataclass(frozen=True)
class IssuedSession:
    token: str
    diner_id: str
    expires_at: datetime
    session_id: UUID


def is_reserved_diner_id(diner_id: str) -> bool:
    """Guest ids and erasure pseudonyms are made here only: a merchant backend can sign in
    neither as a guest nor as an erased diner (whose orders would be its again)."""
    return diner_id.startswith((GUEST_PREFIX, ERASED_PREFIX))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _signer() -> signing.Signer:
    return signing.Signer(salt=_SALT, algorithm="sha256")


def _sign(*, session: DinerSession, secret: str, expires_at: datetime) -> str:
    claims = {
        "t": session.tenant_id,
        "s": session.pk.hex,
        "d": session.diner_id,
        "e": int(expires_at.timestamp()),
        "k": secret,
    }
    return _signer().sign_object(claims)


def read_token(token: str, *, now: float | None = None) -> SessionClaims:
    """The claims of a token signed here and not yet expired; :class:`SessionRefused`
    otherwise. Pure computation: no database; a signature checked once is remembered."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise SessionRefused("SESSION_INVALID", "Malformed session token")
    claims = _verified(token)
    if claims.expires_at <= (timezone.now().timestamp() if now is None else now):
        raise SessionRefused("SESSION_EXPIRED", "The session token has expired; open a new one")
    return claims


@lru_cache(maxsize=4096)
def _verified(token: str) -> SessionClaims:
    """The claims of a token whose signature verifies, memoised per process.

    A diner's app sends the same token on every call, and unsigning it (base64, JSON, an
    HMAC, a UUID) costs more than the rest of a cached credential check. Only tokens that
    verified are kept (a refusal raises, and ``lru_cache`` keeps no exception), the expiry is
    checked on every use by :func:`read_token`, and a change of the signing keys empties it.
    """
    try:
        raw = _signer().unsign_object(token)
        return SessionClaims(
            tenant_id=int(raw["t"]),
            session_id=UUID(hex=raw["s"]),
            diner_id=str(raw["d"]),
            expires_at=int(raw["e"]),
            secret=str(raw["k"]),
        )
    # Claims no token of ours holds fail their conversion: int() of Infinity raises
    # OverflowError, UUID(hex=<a number>) AttributeError. Only the signing key can make them,
    # and they are refused as any unusable token is.
    except (signing.BadSignature, KeyError, TypeError, ValueError, OverflowError, AttributeError):
        raise SessionRefused("SESSION_INVALID", "Unknown or forged session token") from None


@receiver(setting_changed)
def _forget_verified(*, setting: str, **_: object) -> None:
    if setting in ("SECRET_KEY", "SECRET_KEY_FALLBACKS"):
        _verified.cache_clear()


def authenticate_token(token: str) -> tuple[SessionClaims, SessionState]:
    """The claims and the (cached) state of a live session, or :class:`SessionRefused`."""
    claims = read_token(token)
    state = session_state(claims.session_id)
    if (
        state is None
        or state.tenant.pk != claims.tenant_id
        or state.diner_id != claims.diner_id
        or not hmac.compare_digest(state.secret_hash, _hash(claims.secret))
    ):
        raise SessionRefused("SESSION_INVALID", "Unknown or forged session token")
    if not state.active:
        raise SessionRefused("SESSION_REVOKED", "The session was ended; open a new one")
    return claims, state


def open_session(*, client: ApiClient, diner_id: str | None = None) -> IssuedSession:
    """A new session of ``diner_id`` (signed in by a merchant key), or of a new guest diner
    (``diner_id`` None: a publishable key). Permission checks are the caller's."""
    guest = diner_id is None
    diner = f"{GUEST_PREFIX}{secrets.token_urlsafe(16)}" if guest else diner_id
    secret = secrets.token_urlsafe(16)
    # The first token, like every refreshed one, ends within the session's max age: each
    # setting may be set to any length, and a lifetime past the max age outlived it.
    lifetime = min(settings.DINER_SESSION_TTL_SECONDS, settings.DINER_SESSION_MAX_AGE_SECONDS)
    # In whole seconds, as the token carries it (and as a refresh sets it): with its fraction
    # the answer and the row named an instant up to a second after the token is refused.
    expires_at = (timezone.now() + timedelta(seconds=lifetime)).replace(microsecond=0)
    session = DinerSession.objects.create(
        tenant_id=client.tenant_id,
        diner_id=diner,
        client=client,
        is_guest=guest,
        secret_hash=_hash(secret),
        expires_at=expires_at,
    )
    return IssuedSession(
        token=_sign(session=session, secret=secret, expires_at=expires_at),
        diner_id=diner,
        expires_at=expires_at,
        session_id=session.pk,
    )


def refresh_session(*, claims: SessionClaims) -> IssuedSession:
    """A token of the same session with a later expiry (at most the session's max age).
    The session must be live in the database, not only in a process's cache."""
    session = (
        DinerSession.objects.filter(
            pk=claims.session_id, revoked_at__isnull=True, client__revoked_at__isnull=True
        )
        .select_related("tenant")
        .first()
    )
    if session is None or not hmac.compare_digest(session.secret_hash, _hash(claims.secret)):
        raise SessionRefused("SESSION_REVOKED", "The session was ended; open a new one")
    now = timezone.now()
    expires_at = min(
        now + timedelta(seconds=settings.DINER_SESSION_TTL_SECONDS),
        session.created_at + timedelta(seconds=settings.DINER_SESSION_MAX_AGE_SECONDS),
    )
    expires_at = expires_at.replace(microsecond=0)
    if expires_at <= now:
        raise SessionRefused("SESSION_EXPIRED", "The session reached its maximum age")
    DinerSession.objects.filter(pk=session.pk, expires_at__lt=expires_at).update(
        expires_at=expires_at
    )
    return IssuedSession(
        token=_sign(session=session, secret=claims.secret, expires_at=expires_at),
        diner_id=session.diner_id,
        expires_at=expires_at,
        session_id=session.pk,
    )


def end_session(*, session_id: UUID) -> None:
    """End one session (its diner signs out). Ending it twice changes nothing."""
    DinerSession.objects.filter(pk=session_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    forget(session_id)


def end_sessions(*, session_ids: Iterable[UUID]) -> int:
    """End the live sessions among ``session_ids`` (staff end them in the admin); how many this
    call ended. One conditional ``UPDATE`` decides: a session already ended or past its expiry,
    or ended meanwhile by a sign-out or another staff member, is not counted again."""
    ids = list(session_ids)
    count = DinerSession.objects.filter(
        pk__in=ids, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).update(revoked_at=timezone.now())
    for session_id in ids:
        forget(session_id)
    return count


def revoke_diner(*, tenant: Tenant, diner_id: str) -> int:
    """End every live session of one diner of ``tenant``; how many were live. Every process
    refuses them within 1 s (:mod:`tenants.credential_cache`)."""
    now = timezone.now()
    live = DinerSession.objects.filter(
        tenant=tenant, diner_id=diner_id, revoked_at__isnull=True, expires_at__gt=now
    )
    ids = list(live.values_list("pk", flat=True))
    count = DinerSession.objects.filter(pk__in=ids, revoked_at__isnull=True).update(revoked_at=now)
    for session_id in ids:
        forget(session_id)
    return count
