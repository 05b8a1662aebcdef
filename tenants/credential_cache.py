"""Per-process cache of what checking a credential reads: no query per API call, 1 s staleness.

Every API call carries a diner session token or an API key. Signatures, expiry and a key's
hash are checked by arithmetic; what arithmetic cannot know is whether the session, the key or
its tenant was revoked, rotated or suspended since. That is read from the database and kept
here, per process, under a key (``session:<id>``, ``key:<prefix>``):

- While the process hears the **credential feed** (Redis pub/sub channel
  ``tenants:credentials``; a listener thread that publishes an echo to itself every 0.25 s,
  through the same client announcements go through, and hears it come back), an entry lives up to
  ``CREDENTIAL_CACHE_SECONDS`` (60 s). Every change made through the product (ending a session,
  revoking a diner or a key, saving a tenant, a key or a session) is announced after its commit
  (:func:`announce`), and every process drops what it concerns when the message arrives.
- While it does not hear the feed (no Redis configured, the connection broke, or the listener
  got no echo for 0.75 s: a node that holds or refuses ``PUBLISH``, as ``CLIENT PAUSE WRITE``
  does, still answers a subscriber's ``PING``, so a PING proved nothing about announcements),
  an entry read more than ``DINER_SESSION_STATE_CACHE_SECONDS``
  (1 s) ago is read again: the short TTL is the fallback bound.

So a change made through the product reaches every process within 1 s whether or not pub/sub
works, unless the announcing process alone cannot publish while the others still hear their
echoes (its own connection to the node broken): its announcement is lost, and the other
processes see the change within ``CREDENTIAL_CACHE_SECONDS``. What the listener may have
missed while it was deaf is made up for by clearing the cache each time it subscribes again
(entries remember the subscription they were read under), and an entry whose read overlapped
an announcement keeps only the short bound. A row changed behind the product's back (SQL by
hand) is seen within ``CREDENTIAL_CACHE_SECONDS``; call :func:`announce` with
:data:`EVERYTHING` to make every process read afresh at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

from idempotency.stores.local_cache import InvalidationListener
from idempotency.stores.nodes import REDIS_UNAVAILABLE
from tenants.redis_routing import client_for_service

logger = logging.getLogger(__name__)

CHANNEL = "tenants:credentials"
EVERYTHING = "*"
MAX_ENTRIES = 50_000
# The listener PINGs this often; when nothing was heard for TRUST_SECONDS the feed may be
# missing messages, and long-lived entries are not trusted until it is heard again.
PING_SECONDS = 0.25
TRUST_SECONDS = 0.75

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry:
    value: Any
    read_at: float
    subscription: int | None  # the feed's subscription it was read under; None: short TTL only


class CredentialCache:
    """A bounded LRU of credential state; thread-safe; entries trusted as the module says."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._generation = 0  # moves on with every invalidation

    def get(self, key: str, load: Callable[[], T | None], *, feed: _Feed) -> T | None:
        """The cached value of ``key`` if it may still be trusted, else ``load()`` (kept)."""
        now = time.monotonic()
        subscription = feed.subscription()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and self._fresh(entry, now, subscription):
                self._entries.move_to_end(key)
                return entry.value
            generation = self._generation
        value = load()
        with self._lock:
            raced = self._generation != generation  # an announcement arrived while we read
            trusted = None if raced or value is None else subscription
            self._entries[key] = _Entry(value, now, trusted)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return value

    @staticmethod
    def _fresh(entry: _Entry, now: float, subscription: int | None) -> bool:
        age = now - entry.read_at
        if age < settings.DINER_SESSION_STATE_CACHE_SECONDS:
            return True
        return (
            subscription is not None
            and entry.subscription == subscription
            and age < settings.CREDENTIAL_CACHE_SECONDS
        )

    def invalidate(self, key: str) -> bool:
        """Drop ``key`` (:data:`EVERYTHING`: every entry). Called by the feed's listener."""
        if key == EVERYTHING:
            self.clear()
            return True
        with self._lock:
            self._generation += 1
            return self._entries.pop(key, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._entries = OrderedDict()


class _Feed:
    """This process's subscription to :data:`CHANNEL` (started on first use, again after a
    fork), and the client announcements are published on."""

    def __init__(self, cache: CredentialCache) -> None:
        self._cache = cache
        self._listener: InvalidationListener | None = None
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The Redis client of the feed's node; None without Redis."""
        if self._client is None:
            self._client = client_for_service("credentials")
        return self._client

    def subscription(self) -> int | None:
        """The current subscription's number if the feed is heard now, else None."""
        listener = self._listener
        if listener is None:
            listener = self._start()
            if listener is None:
                return None
        if listener.heard_within(TRUST_SECONDS):
            return listener.subscriptions
        listener.ensure_running()  # after a fork, or if the thread died
        return None

    def _start(self) -> InvalidationListener | None:
        with self._lock:
            if self._listener is None:
                client = self.client()
                if client is None:
                    return None
                self._listener = InvalidationListener(
                    client, self._cache, channel=CHANNEL, ping_interval_s=PING_SECONDS, echo=True
                )
                self._listener.start()
            return self._listener

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # the listener resets itself (its own fork hook)

    def stop(self) -> None:
        """Stop listening (tests; the cache falls back to the short TTL)."""
        with self._lock:
            if self._listener is not None:
                self._listener.stop()
            self._listener = None
            self._client = None


_cache = CredentialCache()
feed = _Feed(_cache)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_cache._after_fork_in_child)
    os.register_at_fork(after_in_child=feed._after_fork_in_child)


def cached(key: str, load: Callable[[], T | None]) -> T | None:
    """``load()``'s answer for ``key``, read at most as often as the module says."""
    return _cache.get(key, load, feed=feed)


def announce(key: str) -> None:
    """``key`` (or :data:`EVERYTHING`) changed: this process forgets it now, every process
    when the current transaction commits (at once outside one)."""
    _cache.invalidate(key)

    def publish() -> None:
        _cache.invalidate(key)  # a read between the change and its commit kept the old row
        client = feed.client()
        if client is None:
            return
        try:
            client.publish(CHANNEL, key)
        except REDIS_UNAVAILABLE:
            # the other processes fall back to the short TTL once their listener hears nothing
            logger.warning("could not announce a credential change on %s", CHANNEL, exc_info=True)

    transaction.on_commit(publish)


def clear() -> None:
    """Forget every entry in this process (tests)."""
    _cache.clear()


def session_key(session_id: object) -> str:
    return f"session:{session_id}"


def api_key_key(prefix: str) -> str:
    return f"key:{prefix}"
