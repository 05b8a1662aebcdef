"""Process-wide engine state: the local result cache, its invalidation listener, and one
:class:`RedisIdempotencyStore` per Redis client."""

from __future__ import annotations

import threading
from functools import cache

from django.utils.module_loading import import_string

from idempotency.conf import engine_setting
from idempotency.local_cache import InvalidationListener, LocalResultCache
from idempotency.redis_store import RedisIdempotencyStore

_lock = threading.Lock()
_stores: dict[int, RedisIdempotencyStore] = {}
_listeners: dict[int, InvalidationListener] = {}


@cache
def local_cache() -> LocalResultCache:
    return LocalResultCache(
        max_entries=engine_setting("LOCAL_CACHE_ENTRIES"),
        ttl_s=engine_setting("LOCAL_CACHE_TTL_SECONDS"),
    )


def redis_store_for(tenant_key: str) -> RedisIdempotencyStore | None:
    """The store for the tenant's Redis node, or None in database-only mode.

    Each distinct client gets one store and one invalidation listener, started lazily (so a
    forked worker starts its own)."""
    client = import_string(engine_setting("REDIS_CLIENT_FOR_TENANT"))(tenant_key)
    if client is None:
        return None
    ident = id(client)
    store = _stores.get(ident)
    if store is None:
        with _lock:
            store = _stores.get(ident)
            if store is None:
                store = _stores[ident] = RedisIdempotencyStore(client)
                _listeners[ident] = InvalidationListener(
                    client, local_cache(), channel=store.channel
                )
                _listeners[ident].start()
    _listeners[ident].ensure_running()
    return store


def reset() -> None:
    """Forget stores and cached results (tests, and after settings change)."""
    with _lock:
        for listener in _listeners.values():
            listener.stop()
        _stores.clear()
        _listeners.clear()
    local_cache().clear()
