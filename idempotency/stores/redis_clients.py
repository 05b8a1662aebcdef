"""Which Redis client serves a tenant's keys. One node (``REDIS_URL``) for now; the default
resolver is a setting so a sharded or clustered topology can replace it."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)


def client_for_tenant(tenant_key: str) -> redis.Redis | None:
    url = getattr(settings, "REDIS_URL", "")
    return _client(url) if url else None
