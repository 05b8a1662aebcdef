"""Idempotency keys: validation of the client's header, scopes, and derived key names.

A client key is only meaningful inside its *scope* — tenant · principal · method · route —
so the same key sent by another tenant or diner is a different key and can never replay
someone else's response (IETF draft-ietf-httpapi-idempotency-key-header, DESIGN §3).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

MAX_KEY_LENGTH = 255
MAX_SCOPE_LENGTH = 255  # IdempotencyRecord.scope
MAX_TENANT_LENGTH = 64  # IdempotencyRecord.tenant_key, and the audits' and counts' tenant_key
AUTO_KEY_PREFIX = "auto:"


class InvalidKey(ValueError):
    """The header is present but is not 1-255 printable ASCII characters, holds a comma, or
    starts with the prefix reserved for automatic keys."""


def validate_key(raw: str) -> str:
    """The key as sent, if it is 1..255 printable ASCII characters (0x20-0x7E) but a comma.

    A server joins a header sent twice into one value with a comma (``K,K``): taken as a key,
    it would differ from the single ``K`` the same client sends on its next try, and the
    operation would run twice. So a comma, which a key made as advised (a UUID) never holds,
    is refused. So is a key starting with ``auto:``, the prefix of the keys the engine derives
    for keyless requests (:func:`automatic_key`): sent by a client, it could name an automatic
    key's record, and a refusal or replay meant for identical keyless requests would answer
    it."""
    if not raw or len(raw) > MAX_KEY_LENGTH:
        raise InvalidKey(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} characters")
    if not (raw.isascii() and raw.isprintable()):  # ASCII's printable range is 0x20-0x7E
        raise InvalidKey("Idempotency-Key must be printable ASCII")
    if "," in raw:
        raise InvalidKey("Idempotency-Key must be sent once, and hold no comma")
    if raw.startswith(AUTO_KEY_PREFIX):
        raise InvalidKey(f"Idempotency-Key must not start with {AUTO_KEY_PREFIX!r} (reserved)")
    return raw


def _digest(*parts: str, length: int = 32) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()[:length]


@dataclass(frozen=True)
class ScopedKey:
    """One idempotency key inside its scope, with every name the layers use for it.

    Each name (most are hashes) is computed once per key: a request asks for them several
    times (local cache, claim, finish, audit), and frozen fields cannot make them stale.

    ``automatic``: the engine derived the key for a keyless request (:func:`automatic_key`).
    Said by the caller that derived it, never read from the key's spelling: a client's key
    can never get an automatic key's short window or its refusals' treatment."""

    tenant: str
    principal: str
    method: str
    route: str
    key: str
    buckets: int = 1
    automatic: bool = False

    @cached_property
    def scope(self) -> str:
        return scope_of(principal=self.principal, method=self.method, route=self.route)

    @property
    def is_automatic(self) -> bool:
        return self.automatic

    @cached_property
    def business_key(self) -> str:
        """64 hex chars for business tables' ``unique(tenant, idempotency_key)``."""
        return _digest(self.tenant, self.scope, self.key, length=64)

    @cached_property
    def key_digest(self) -> str:
        """What the database record keeps in place of the key (:func:`key_digest`)."""
        return key_digest(self.key)

    @cached_property
    def redis_key(self) -> str:
        return redis_key_for(
            tenant=self.tenant, scope=self.scope, key=self.key, buckets=self.buckets
        )


# Between a scope's principal, method and route; a principal may not hold it (web/http.py)
SCOPE_SEPARATOR = "|"


def scope_of(*, principal: str, method: str, route: str) -> str:
    """``<principal>|<method>|<route>``, as records, claim keys and advisory locks name it.

    It must fit the record's column (:data:`MAX_SCOPE_LENGTH`), and two distinct scopes must
    never share a name: cut short, every endpoint of a long principal had the same scope, and
    one endpoint's key replayed another's answer. So a scope of :data:`MAX_SCOPE_LENGTH`
    characters or more is kept as a readable prefix, ``#`` and the SHA-256 of the whole scope,
    exactly :data:`MAX_SCOPE_LENGTH` long: shorter scopes are kept as they are, and cannot
    collide with one of those."""
    full = SCOPE_SEPARATOR.join((principal, method, route))
    if len(full) < MAX_SCOPE_LENGTH:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()
    return f"{full[: MAX_SCOPE_LENGTH - len(digest) - 1]}#{digest}"


# What a tenant may not hold: ":" ends the tenant in a sub-bucket's hash tag ``{t:<tenant>:<n>}``
# and "}" ends the tag itself, so "a:eu" or "a}eu" would name keys inside tenant "a"'s
TENANT_TAG_CHARACTERS = (":", "}")


def tenant_hash_tag(tenant: str) -> str:
    """``{t:<tenant>}``: the hash tag of the tenant's keys, so its cluster slot."""
    return f"{{t:{tenant}}}"


def key_digest(key: str) -> str:
    """The 32 hex chars that stand for a client key at rest: in its Redis key and in its
    database record. Nothing keeps the raw key, yet purge and erasure can rebuild the Redis
    key from a record (:func:`redis_key_from_digest`)."""
    return _digest(key)


def redis_key_for(*, tenant: str, scope: str, key: str, buckets: int = 1) -> str:
    """``idem:{t:<tenant>}:<scope hash>:<key digest>``; a hot tenant split into ``buckets``
    sub-buckets gets ``{t:<tenant>:<b>}``. Either way one key maps to one cluster slot."""
    return redis_key_from_digest(
        tenant=tenant, scope=scope, digest=key_digest(key), buckets=buckets
    )


def redis_key_from_digest(*, tenant: str, scope: str, digest: str, buckets: int = 1) -> str:
    """The Redis key of a client key known only by its :func:`key_digest` (a record's
    ``key``). The sub-bucket is the digest's first 8 hex chars modulo ``buckets``."""
    tag = f"t:{tenant}"
    if buckets > 1:
        tag += f":{int(digest[:8], 16) % buckets}"
    return f"idem:{{{tag}}}:{_digest(scope, length=16)}:{digest}"


def automatic_key(fingerprint: str) -> str:
    """The key of a request that sent none: its scope and fingerprint. Its record lives for
    the endpoint's auto-key window, so identical requests inside that window replay."""
    return f"{AUTO_KEY_PREFIX}{fingerprint}"
