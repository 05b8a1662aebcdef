"""Stable placement of tenants on logical shards.

A tenant's logical shard (0..15) is part of every order ID it creates, and later decides which
Redis node serves the tenant. It is a hash of the tenant's primary key, so it never changes for
a tenant, and it spreads tenants evenly whatever their slugs look like.
"""

from __future__ import annotations

import hashlib

LOGICAL_SHARDS = 16  # four bits of every order ID


def stable_hash(value: str) -> int:
    """A 64-bit hash that is the same in every process and Python version (unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


def tenant_shard(tenant_id: int) -> int:
    return stable_hash(f"tenant:{tenant_id}") % LOGICAL_SHARDS
