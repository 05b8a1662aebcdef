"""The default Redis hooks: one server, ``IDEMPOTENCY["REDIS_URL"]``, for every tenant.

They read the engine's own setting and nothing else (never the host's ``REDIS_URL`` or cache
configuration): a site that names no Redis runs database-only rather than on whatever server
and database happen to be configured for something else. A sharded or clustered topology
replaces them through ``REDIS_CLIENT_FOR_TENANT``, ``SCRIPT_CHANNEL_CLIENT`` and
``ALL_REDIS_CLIENTS``.
"""

from __future__ import annotations

from functools import cache

import redis

from idempotency.core.conf import engine_setting
from idempotency.stores.reply_deadline import connection_class_for


@cache
def _client(url: str) -> redis.Redis:
    """Each reply read within the 1 s socket timeout in all (:mod:`.reply_deadline`)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        connection_class=connection_class_for(url),
    )


def _configured() -> redis.Redis | None:
    url = engine_setting("REDIS_URL")
    return _client(url) if url else None


def client_for_tenant(tenant_key: str) -> redis.Redis | None:
    return _configured()


def script_channel_client() -> redis.Redis | None:
    return _configured()


def all_clients() -> list[redis.Redis]:
    client = _configured()
    return [] if client is None else [client]
