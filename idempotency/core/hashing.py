"""Keyed hashes: what the engine keeps at rest instead of raw keys and field values.

An idempotency key is the client's handle on its operations, and a declared field (a coupon
code, a phone number) is often guessable: a plain SHA-256 of either can be reversed by trying
candidates. So per-field fingerprint hashes, fingerprints, and the keys written to audits,
logs and exports are HMAC-SHA256 under a server secret, ``IDEMPOTENCY["HASH_KEYS"]``: a list
of ``(key_id, secret)`` pairs, newest first. New hashes use the first; every listed key still
verifies, so a rotation is "prepend the new key, drop the old one once nothing hashed under it
is kept" (records live ``TTL_SECONDS`` or a tenant's longer retention, ``RECORD_TTL_FOR_TENANT``;
audits are matched under every listed key).

Fingerprints say which key made them through their version number
(:func:`idempotency.core.fingerprint.keyed_version`). With no key configured the engine derives
one from ``SECRET_KEY`` under :data:`DERIVED_KEY_ID`; ``manage.py check`` refuses that off DEBUG
(``idempotency.E004``), as the host's settings refuse a missing ``SECRET_KEY``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from functools import cache

from django.conf import settings

from idempotency.core.conf import engine_setting

DERIVED_KEY_ID = 99
"""The id of the development key derived from ``SECRET_KEY`` when ``HASH_KEYS`` is empty."""

MAX_KEY_ID = 327
"""Key ids are 1..327, so a keyed fingerprint version (100 x id + form) fits a smallint."""

DIGEST_HEX_CHARS = 32


@dataclass(frozen=True)
class HashKey:
    id: int
    secret: bytes


def hash_keys() -> tuple[HashKey, ...]:
    """The configured keys, newest first (never empty: see :data:`DERIVED_KEY_ID`)."""
    configured = tuple(engine_setting("HASH_KEYS") or ())
    return _parsed(configured, settings.SECRET_KEY)


def current_key() -> HashKey:
    return hash_keys()[0]


def key_by_id(key_id: int) -> HashKey | None:
    return next((k for k in hash_keys() if k.id == key_id), None)


def keyed_digest(value: str, *, key: HashKey | None = None) -> str:
    """``k<id>:<32 hex>``: the HMAC of ``value`` under ``key`` (default: the current one),
    labelled with the key's id. What audits, logs and exports keep instead of a raw key."""
    key = key or current_key()
    mac = hmac.digest(key.secret, value.encode("utf-8", "surrogatepass"), "sha256")
    return f"k{key.id}:{mac.hex()[:DIGEST_HEX_CHARS]}"


def principal_digest(principal: str, *, key: HashKey | None = None) -> str:
    """The HMAC of a caller's principal (a client address, a diner id) in hex, under ``key``
    (default: the current one): what names its rate counters and its token ledger in Redis,
    so the key names alone do not give the principal back (a plain SHA-256 of an IPv4 address
    is reversed by hashing every candidate). Erasure looks under every configured key."""
    key = key or current_key()
    return hmac.digest(key.secret, principal.encode("utf-8", "surrogatepass"), "sha256").hex()


def digest_candidates(value: str) -> list[str]:
    """``value``'s digest under every configured key: a search by key matches rows hashed
    before and after a rotation."""
    return [keyed_digest(value, key=k) for k in hash_keys()]


@cache
def _parsed(configured: tuple, secret_key: str) -> tuple[HashKey, ...]:
    if not configured:
        derived = hmac.new(
            secret_key.encode(), b"idempotency.core.hashing", hashlib.sha256
        ).digest()
        return (HashKey(DERIVED_KEY_ID, derived),)
    return tuple(HashKey(int(key_id), str(secret).encode()) for key_id, secret in configured)
