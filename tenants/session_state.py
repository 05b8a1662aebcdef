"""Per-process cache of diner sessions' revocation state: the one lookup a Bearer request costs.

Signature and expiry are checked by arithmetic (:func:`tenants.diner_sessions.read_token`);
what arithmetic cannot know is whether the session, or the API key that opened it, was revoked
since. That answer is read from the database at most once per
``DINER_SESSION_STATE_CACHE_SECONDS`` (1 s) per session per process, and kept in a bounded
LRU: a revocation reaches every process within that bound (an entry read before the revocation
expires at most that long after it), and a diner's burst of requests costs one query a second
at most. Nothing here writes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from uuid import UUID

from django.conf import settings

from tenants.models import ApiClient, DinerSession, Tenant

MAX_ENTRIES = 50_000


@dataclass(frozen=True)
class SessionState:
    tenant: Tenant
    client: ApiClient
    diner_id: str
    secret_hash: str
    active: bool  # neither the session nor the key that opened it is revoked


_entries: OrderedDict[UUID, tuple[float, SessionState | None]] = OrderedDict()
_lock = threading.Lock()


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
    """The session's state as of at most ``DINER_SESSION_STATE_CACHE_SECONDS`` ago; None
    if no such session exists."""
    now = time.monotonic()
    with _lock:
        cached = _entries.get(session_id)
        if cached is not None and cached[0] > now:
            _entries.move_to_end(session_id)
            return cached[1]
    state = _load(session_id)
    with _lock:
        _entries[session_id] = (now + settings.DINER_SESSION_STATE_CACHE_SECONDS, state)
        _entries.move_to_end(session_id)
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)
    return state


def forget(session_id: UUID) -> None:
    """Drop one entry (this process ends a session: it sees the end at once)."""
    with _lock:
        _entries.pop(session_id, None)


def clear() -> None:
    """Forget every entry (tests; revoking an API key in this process)."""
    with _lock:
        _entries.clear()
