"""In-process cache of *finished* idempotent results (seed 4.2).

A replay storm (a client retrying in a loop, a double-clicked button) should not cost a Redis
round trip per request. Only finished results are cached: they never change until they
expire or staff purge them, and a purge is announced on Redis pub/sub, which
:class:`InvalidationListener` turns into :meth:`LocalResultCache.invalidate`. Whatever the
listener misses (it was disconnected), it makes up for by clearing the whole cache when it
subscribes again; the entry TTL bounds staleness in the remaining window.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from idempotency.core.outcomes import ClaimResult, Outcome, StoredResponse
from idempotency.stores.redis_store import DEFAULT_CHANNEL

__all__ = ["CachedResult", "InvalidationListener", "LocalResultCache"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedResult:
    """A finished result as the cache holds it."""

    fingerprint: str
    fingerprint_version: int
    response: StoredResponse

    def matches(self, fingerprints: Mapping[int, str]) -> bool:
        """Whether a request with these per-version fingerprints is the same operation.

        Same rule as claim.lua: compare under the stored version; a version the caller
        cannot compute counts as a mismatch.
        """
        return fingerprints.get(self.fingerprint_version) == self.fingerprint

    def to_claim_result(self, fingerprints: Mapping[int, str]) -> ClaimResult:
        """The answer a claim would have given, so callers treat both paths alike."""
        if self.matches(fingerprints):
            return ClaimResult(
                Outcome.HIT,
                response=self.response,
                stored_fingerprint=self.fingerprint,
                fingerprint_version=self.fingerprint_version,
            )
        return ClaimResult(
            Outcome.MISMATCH,
            stored_fingerprint=self.fingerprint,
            fingerprint_version=self.fingerprint_version,
        )


# What an entry costs beside its key and reply bytes: the tuple, dataclasses and dict slot.
ENTRY_OVERHEAD_BYTES = 400


def entry_bytes(key: str, response: StoredResponse) -> int:
    """What one entry is charged against the byte budget: a close upper estimate of the
    memory it holds (key, body, pointer, headers, fixed overhead)."""
    headers = sum(len(name) + len(value) for name, value in response.headers)
    return len(key) + len(response.body) + len(response.pointer) + headers + ENTRY_OVERHEAD_BYTES


class LocalResultCache:
    """Thread-safe LRU of finished results with a per-entry TTL, bounded twice: at most
    ``max_entries`` entries and at most ``max_bytes`` bytes (:func:`entry_bytes` each), so a
    process's memory for it is bounded whatever the size of the replies.

    ``clock`` is injectable so the TTL can be tested without sleeping.
    """

    def __init__(
        self,
        max_entries: int = 10_000,
        ttl_s: float = 60.0,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries <= 0:
            raise ValueError("max_entries must be positive")
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if ttl_s < 0:
            # 0 is LOCAL_CACHE_TTL_SECONDS's "keep none here" (the check lets it through):
            # every lookup then asks Redis
            raise ValueError("ttl_s must be 0 or more")
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[CachedResult, float, int]] = OrderedDict()
        self._bytes = 0
        self._dropped = 0  # keys invalidated so far: see mark()
        _FORK_HOOKS.add(self)

    def get(self, key: str) -> CachedResult | None:
        """The live entry for ``key`` (and mark it recently used), or ``None``."""
        now = self._clock()
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                return None
            if item[1] <= now:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return item[0]

    def lookup(self, key: str, *, fingerprints: Mapping[int, str]) -> ClaimResult | None:
        """HIT or MISMATCH from the cache, or ``None`` when the caller must ask Redis."""
        entry = self.get(key)
        return None if entry is None else entry.to_claim_result(fingerprints)

    def put(
        self,
        key: str,
        *,
        fingerprint: str,
        fingerprint_version: int,
        response: StoredResponse,
        ttl_s: float | None = None,
        unless_dropped_since: int | None = None,
    ) -> None:
        """Cache a finished result; evicts the least recently used entries while either bound
        is exceeded. An entry larger than the whole byte budget is not cached.

        ``ttl_s`` may shorten the default, e.g. to the remaining Redis TTL of the entry.
        ``unless_dropped_since``: a :meth:`mark` taken before the result was read or stored;
        nothing is cached if a key was invalidated since (it may have been this one).
        """
        ttl = self._ttl_s if ttl_s is None else min(ttl_s, self._ttl_s)
        if ttl <= 0:
            return  # it would be expired when read: keeping it would only take memory
        entry = CachedResult(fingerprint, fingerprint_version, response)
        cost = entry_bytes(key, response)
        expires_at = self._clock() + ttl
        with self._lock:
            if unless_dropped_since is not None and unless_dropped_since != self._dropped:
                return
            self._drop(key)
            if cost > self._max_bytes:
                return
            self._entries[key] = (entry, expires_at, cost)
            self._bytes += cost
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                self._drop(next(iter(self._entries)))

    def invalidate(self, key: str) -> bool:
        """Drop ``key``; ``True`` if it was cached."""
        with self._lock:
            self._dropped += 1
            return self._drop(key)

    def clear(self) -> None:
        """Drop everything (after missed invalidations, or in a freshly forked child)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def mark(self) -> int:
        """Where the invalidations stand now, for :meth:`put`'s ``unless_dropped_since``. A
        request that read or stored a result before an erasure or a purge removed its key (and
        announced it) put it here after the announcement had passed, and replayed what was
        erased for up to the entry's TTL: it takes a mark first, and keeps nothing if a key was
        invalidated since (rare: only erasures, purges and offboardings announce keys)."""
        with self._lock:
            return self._dropped

    @property
    def bytes_used(self) -> int:
        """Bytes charged for the entries held now (expired ones included until pruned)."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        """Number of live entries (expired ones are pruned first)."""
        now = self._clock()
        with self._lock:
            for key in [k for k, item in self._entries.items() if item[1] <= now]:
                self._drop(key)
            return len(self._entries)

    def _drop(self, key: str) -> bool:
        """Remove ``key`` and its charge; the caller holds the lock."""
        item = self._entries.pop(key, None)
        if item is None:
            return False
        self._bytes -= item[2]
        return True

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock at fork time; in the child it would never be
        # released. The child's listener has not subscribed yet, so drop the entries too.
        self._lock = threading.Lock()
        self._entries = OrderedDict()
        self._bytes = 0


class InvalidationListener:
    """A daemon thread that applies invalidations published on ``channel`` to ``cache``.

    Each message's data is an idempotency key. On every (re)subscription the whole cache is
    cleared, because invalidations published while the connection was down are lost; redis-py
    may reconnect transparently inside ``get_message``, and the fresh ``subscribe``
    confirmation is what reveals that. A PING every ``ping_interval_s`` detects a silently
    dead connection. After ``os.fork()`` the child has no thread: call :meth:`ensure_running`
    (cheap, e.g. once per request) to start one there.

    ``echo``: instead of the PING, ``PUBLISH`` on a channel of this connection's own (through
    the client's ordinary connections, as announcements are sent) and count the feed as heard
    only when that comes back. A node can keep answering a subscriber's PING while every
    ``PUBLISH`` is held or refused: ``CLIENT PAUSE WRITE`` (a ``FAILOVER``), or a password
    set at runtime, which only new connections are asked for. Announcements are then lost
    while the PINGs said all was well, and a reader that trusts its entries longer while it
    hears the feed (``tenants.credential_cache``) went on trusting them. An echo that fails
    or does not come back by the next one ends the connection like a missing PONG: the cache
    is cleared when it subscribes again.
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        cache: LocalResultCache,
        *,
        channel: str = DEFAULT_CHANNEL,
        poll_interval_s: float = 0.1,
        ping_interval_s: float = 5.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 5.0,
        echo: bool = False,
    ) -> None:
        self._client = client
        self._echo = echo
        self._cache = cache
        self._channel = channel
        self._poll_interval_s = poll_interval_s
        self._ping_interval_s = ping_interval_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._stopped = True
        self._reset_process_state()
        _FORK_HOOKS.add(self)

    @property
    def channel(self) -> str:
        return self._channel

    @property
    def is_running(self) -> bool:
        """Whether this process has a live listener thread."""
        thread = self._thread
        return self._pid == os.getpid() and thread is not None and thread.is_alive()

    @property
    def subscriptions(self) -> int:
        """How many times this process's listener has (re)subscribed."""
        with self._subscribed:
            return self._subscription_count

    def start(self) -> None:
        """Start the thread in this process, if it is not running already."""
        self._check_pid()
        with self._lock:
            self._stopped = False
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop_event = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._stop_event,),
                name="idem-invalidation-listener",
                daemon=True,
            )
            self._thread.start()

    def ensure_running(self) -> None:
        """Start the thread again if it is not running here (new pid, or it died), unless
        :meth:`stop` was called."""
        if not self._stopped and not self.is_running:
            self.start()

    def stop(self, *, timeout_s: float = 2.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` for it to end."""
        self._check_pid()
        with self._lock:
            self._stopped = True
            self._stop_event.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def heard_within(self, seconds: float) -> bool:
        """Whether this process's listener got anything (a message, a subscription, the
        answer to its PING or its echo) from Redis in the last ``seconds``: with a ping
        interval shorter than ``seconds``, False means the feed may be missing messages right
        now."""
        # No thread check: a dead thread stops hearing, and this is asked on every request.
        return self._pid == os.getpid() and time.monotonic() - self._last_heard < seconds

    def wait_subscribed(self, timeout_s: float, *, more_than: int = 0) -> bool:
        """Wait until the listener has subscribed more than ``more_than`` times."""
        with self._subscribed:
            return self._subscribed.wait_for(
                lambda: self._subscription_count > more_than, timeout=timeout_s
            )

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            self._reset_process_state()

    def _reset_process_state(self) -> None:
        """Forget the thread and locks of the parent process (also the initial state)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._subscribed = threading.Condition()
        self._subscription_count = 0
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._last_heard = float("-inf")
        self._answers = 0  # PONGs and echoes received: what says a connection worked

    def _after_fork_in_child(self) -> None:
        self._reset_process_state()

    def _run(self, stop: threading.Event) -> None:
        backoff = self._backoff_initial_s
        failing = False  # since the last subscription: one traceback per outage
        while not stop.is_set():
            subscribed_before, answered_before = self.subscriptions, self._answers
            try:
                self._listen(stop)
            except Exception:  # any failure: log, forget what we may have missed, retry
                # it had worked: start over. An echo listener's subscription is not enough:
                # a node holding PUBLISH takes it, then fails every echo, and each attempt
                # logged a traceback
                if self._answers > answered_before or (
                    not self._echo and self.subscriptions > subscribed_before
                ):
                    backoff, failing = self._backoff_initial_s, False
                # the outage's first failure with its traceback, later ones in a line each:
                # every process of a site has a listener, and Redis down made them log a
                # traceback per attempt
                logger.warning(
                    "idempotency invalidation listener %s %s; reconnecting in %.2fs",
                    "still cannot reach" if failing else "lost",
                    self._channel,
                    backoff,
                    exc_info=not failing,
                )
                failing = True
                self._cache.clear()
                stop.wait(backoff)
                backoff = min(backoff * 2, self._backoff_max_s)

    def _listen(self, stop: threading.Event) -> None:
        """One connection's life: subscribe, apply messages, ping; raise when it breaks."""
        pubsub = self._client.pubsub()
        # this connection's own echo channel (echo mode): a reply to a PUBLISH, like a PONG
        echo = f"{self._channel}:echo:{secrets.token_hex(8)}".encode() if self._echo else None
        try:
            pubsub.subscribe(self._channel, *([echo] if echo else []))
            last_ping = time.monotonic()
            awaiting_pong = False
            while not stop.is_set():
                message = pubsub.get_message(timeout=self._poll_interval_s)
                if message is not None:
                    self._last_heard = time.monotonic()
                if message is None:
                    pass
                elif echo is not None and _channel_of(message) == echo:
                    if message["type"] == "message":  # its subscription's confirmation is not
                        awaiting_pong = False  # the echo
                        self._answers += 1
                elif message["type"] == "pong":
                    awaiting_pong = False
                    self._answers += 1
                else:
                    self._handle(message)
                now = time.monotonic()
                if now - last_ping >= self._ping_interval_s:
                    if awaiting_pong:
                        raise redis.ConnectionError(
                            "no echo of a PUBLISH on the invalidation connection"
                            if echo
                            else "no PONG on the invalidation connection"
                        )
                    if echo:
                        self._client.publish(echo, b"echo")  # a refusal raises, as a lost PONG
                    else:
                        pubsub.ping()
                    last_ping, awaiting_pong = now, True
        finally:
            try:
                pubsub.close()
            except Exception:  # closing a broken connection may fail; nothing to do
                logger.debug("closing invalidation pubsub failed", exc_info=True)

    def _handle(self, message: Mapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "subscribe":
            self._cache.clear()
            with self._subscribed:
                self._subscription_count += 1
                self._subscribed.notify_all()
        elif kind == "message":
            data = message["data"]
            try:
                key = data.decode("utf-8") if isinstance(data, bytes) else str(data)
            except UnicodeDecodeError:
                self._cache.clear()  # cannot tell which entry it meant: drop them all
                return
            self._cache.invalidate(key)


def _channel_of(message: Mapping[str, Any]) -> bytes | None:
    """The channel a pub/sub message came on, as bytes whatever the client decodes."""
    channel = message.get("channel")
    return channel.encode() if isinstance(channel, str) else channel


class _ForkHooks:
    """Objects whose locks and threads must be reset in a forked child."""

    def __init__(self) -> None:
        self._objects: weakref.WeakSet[Any] = weakref.WeakSet()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def add(self, obj: Any) -> None:
        self._objects.add(obj)

    def _after_fork_in_child(self) -> None:
        for obj in list(self._objects):
            obj._after_fork_in_child()


_FORK_HOOKS = _ForkHooks()
