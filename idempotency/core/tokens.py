"""Pre-issued one-time idempotency tokens (seed 2.4).

A client that cannot (or should not) mint its own keys asks for a batch of tokens up front
and sends one as ``Idempotency-Key`` per operation. Issuing N tokens is one Redis pipeline;
checking N tokens is one more.

A token reads ``tok_<id>.<mac>``: ``id`` is 128 random bits, ``mac`` the first 128 bits of an
HMAC-SHA256 over (tenant, principal, id) under a key derived from ``SECRET_KEY`` the way
Django's ``salted_hmac`` derives it (``sha256(salt + secret)``, computed once per secret, not
per token); ``SECRET_KEY_FALLBACKS`` still verify during a key rotation. So:

- a forged or mangled token, or one presented by another tenant or principal, is refused by
  arithmetic alone (400 ``IDEMPOTENCY_TOKEN_INVALID``), without a Redis lookup;
- a token only names its issuer; the Redis key ``idem:{t:<tenant>}:tok:<id>`` says whether it
  is still unused. Its value is ``p:<principal>`` while unused (TTL ``TOKEN_TTL_SECONDS``,
  24 h) and ``u:<claim key>`` once consumed, set in the same Lua call as the claim
  (``claim_token.lua``): the operation that consumed it keeps its retries (HIT, IN_PROGRESS,
  REUSED, and a new claim after a crash or a 5xx), any other operation gets 409
  ``IDEMPOTENCY_TOKEN_USED``, and an expired token 422 ``IDEMPOTENCY_TOKEN_UNKNOWN``.

Keys that start with ``tok_`` are therefore reserved for tokens.

**Database-only mode** (no Redis, breaker open, Redis error during the claim): a validly
signed token is accepted as a plain key. The idempotency record still makes the operation run
once and replay for retries; what is lost for that time is only "one token, one operation"
(the token could also serve another endpoint, as a plain key may). Issuing and checking need
Redis and answer 503 ``IDEMPOTENCY_TOKENS_UNAVAILABLE`` without it: a token stored nowhere
would be refused as unknown once Redis is back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.encoding import force_bytes
from redis.exceptions import RedisError

from idempotency.core.conf import engine_setting
from idempotency.core.keys import redis_key_for
from idempotency.stores.redis_store import TokenUse

__all__ = [
    "TOKEN_PREFIX",
    "InvalidToken",
    "IssuedTokens",
    "TokenStatus",
    "TokensUnavailable",
    "check_tokens",
    "is_token",
    "issue_tokens",
    "new_tokens",
    "read_token_states",
    "sign_token",
    "store_tokens",
    "token_key",
    "token_use",
    "verify_token",
]

TOKEN_PREFIX = "tok_"
_SALT = "idempotency.core.tokens"
_ID_BYTES = 16
_MAC_BYTES = 16  # 128-bit truncated HMAC-SHA256: forging one is a 2^128 guess
_B64_LEN = 22  # unpadded base64url of 16 bytes
_TOKEN_RE = re.compile(
    rf"^{TOKEN_PREFIX}([A-Za-z0-9_-]{{{_B64_LEN}}})\.([A-Za-z0-9_-]{{{_B64_LEN}}})$"
)
_UNUSED = "p:"
_USED = "u:"


class InvalidToken(ValueError):
    """Malformed, forged, or issued to another tenant or principal."""


class TokensUnavailable(Exception):
    """The tenant's Redis node cannot be used now (not configured, breaker open, error)."""


class TokenStatus(StrEnum):
    UNUSED = "unused"
    USED = "used"
    UNKNOWN = "unknown"  # signed by us for this caller, but not in Redis: expired
    INVALID = "invalid"  # malformed, forged, or another caller's


@dataclass(frozen=True)
class IssuedTokens:
    tokens: list[str]
    expires_at: datetime
    ttl_seconds: int


def is_token(key: str) -> bool:
    """Does this ``Idempotency-Key`` claim to be a pre-issued token?"""
    return key.startswith(TOKEN_PREFIX)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@lru_cache(maxsize=8)
def _derived_key(secret: str | bytes) -> bytes:
    """``salted_hmac``'s key derivation, once per secret instead of once per token."""
    return hashlib.sha256(force_bytes(_SALT) + force_bytes(secret)).digest()


def _mac(*, tenant: str, principal: str, token_id: str, secret: str | bytes) -> str:
    # Length-prefixed, so no (tenant, principal) pair can be re-split into another.
    message = f"{len(tenant)}:{tenant}|{len(principal)}:{principal}|{token_id}".encode()
    digest = hmac.digest(_derived_key(secret), message, "sha256")
    return _b64(digest[:_MAC_BYTES])


def sign_token(
    *, tenant: str, principal: str, token_id: str, secret: str | bytes | None = None
) -> str:
    """The token for ``token_id`` bound to ``tenant`` and ``principal``."""
    mac = _mac(
        tenant=tenant,
        principal=principal,
        token_id=token_id,
        secret=settings.SECRET_KEY if secret is None else secret,
    )
    return f"{TOKEN_PREFIX}{token_id}.{mac}"


def verify_token(
    token: str, *, tenant: str, principal: str, secret: str | bytes | None = None
) -> str:
    """The token's id if it was signed by us for this tenant and principal; else
    :class:`InvalidToken`. Pure computation, no Redis."""
    match = _TOKEN_RE.fullmatch(token)
    if match is None:
        raise InvalidToken("not a well-formed idempotency token")
    token_id, mac = match.groups()
    candidates = (
        [secret] if secret is not None else [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    )
    for candidate in candidates:
        expected = _mac(tenant=tenant, principal=principal, token_id=token_id, secret=candidate)
        if constant_time_compare(expected, mac):
            return token_id
    raise InvalidToken("this idempotency token was not issued to this caller")


def new_tokens(
    *, tenant: str, principal: str, count: int, secret: str | bytes | None = None
) -> list[str]:
    """``count`` fresh signed tokens (not stored yet)."""
    return [
        sign_token(
            tenant=tenant,
            principal=principal,
            token_id=_b64(secrets.token_bytes(_ID_BYTES)),
            secret=secret,
        )
        for _ in range(count)
    ]


def token_key(*, tenant: str, token: str, buckets: int = 1, namespace: str = "idem") -> str:
    """``<namespace>:{t:<tenant>}:tok:<id>``, under the very hash tag of every claim key made
    from this token (sub-bucket included), so ``claim_token.lua`` touches one slot."""
    if buckets > 1:
        claim_key = redis_key_for(tenant=tenant, scope="", key=token, buckets=buckets)
        tag = claim_key[claim_key.index("{") : claim_key.index("}") + 1]
    else:
        tag = f"{{t:{tenant}}}"  # what redis_key_for gives without buckets, minus two hashes
    token_id = token[len(TOKEN_PREFIX) :].split(".", 1)[0]
    return f"{namespace}:{tag}:tok:{token_id}"


def token_use(
    *, tenant: str, principal: str, token: str, claim_key: str, mark_ttl_seconds: int, buckets: int
) -> TokenUse:
    """What the claim of ``claim_key`` needs to consume ``token`` (already verified)."""
    return TokenUse(
        key=token_key(tenant=tenant, token=token, buckets=buckets),
        unused_value=_UNUSED + principal,
        used_value=_USED + claim_key,
        mark_ttl_ms=mark_ttl_seconds * 1000,
    )


def store_tokens(
    client: Any,
    *,
    tenant: str,
    principal: str,
    tokens: Sequence[str],
    ttl_seconds: int,
    buckets: int = 1,
    namespace: str = "idem",
) -> None:
    """Store ``tokens`` as unused, each under its own key with a TTL: one pipeline, one round
    trip (on a Redis Cluster, one per node holding the tenant's slots)."""
    pipe = client.pipeline(transaction=False)
    value = _UNUSED + principal
    for token in tokens:
        key = token_key(tenant=tenant, token=token, buckets=buckets, namespace=namespace)
        pipe.set(key, value, ex=ttl_seconds)
    pipe.execute()


def read_token_states(
    client: Any,
    *,
    tenant: str,
    principal: str,
    tokens: Sequence[str],
    buckets: int = 1,
    namespace: str = "idem",
    secret: str | bytes | None = None,
) -> list[TokenStatus]:
    """Each token's status, in order: signatures checked locally, the rest in one pipeline of
    ``GET`` (the value tells unused from used, which ``EXISTS`` could not)."""
    statuses: list[TokenStatus | None] = []
    pipe = client.pipeline(transaction=False)
    pending = 0
    for token in tokens:
        try:
            verify_token(token, tenant=tenant, principal=principal, secret=secret)
        except InvalidToken:
            statuses.append(TokenStatus.INVALID)
            continue
        statuses.append(None)
        pipe.get(token_key(tenant=tenant, token=token, buckets=buckets, namespace=namespace))
        pending += 1
    values = iter(pipe.execute() if pending else [])
    unused = (_UNUSED + principal).encode()
    return [status or _status_of(next(values), unused) for status in statuses]


def _status_of(value: bytes | None, unused: bytes) -> TokenStatus:
    if value is None:
        return TokenStatus.UNKNOWN
    if value == unused:
        return TokenStatus.UNUSED
    if value.startswith(_USED.encode()):
        return TokenStatus.USED
    return TokenStatus.INVALID  # stored for another principal: cannot be this caller's


def issue_tokens(*, tenant: str, principal: str, count: int) -> IssuedTokens:
    """Issue ``count`` tokens to ``principal`` on the tenant's node, or raise
    :class:`TokensUnavailable`. ``expires_at`` is taken before storing, so it is never later
    than the keys' real expiry."""
    if not 1 <= count <= engine_setting("TOKEN_MAX_BATCH"):
        raise ValueError(f"count must be 1..{engine_setting('TOKEN_MAX_BATCH')}")
    ttl = int(engine_setting("TOKEN_TTL_SECONDS"))
    expires_at = timezone.now() + timedelta(seconds=ttl)
    tokens = new_tokens(tenant=tenant, principal=principal, count=count)
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1)

    def store(client: Any) -> bool:
        store_tokens(
            client,
            tenant=tenant,
            principal=principal,
            tokens=tokens,
            ttl_seconds=ttl,
            buckets=buckets,
        )
        return True

    if not _on_node(tenant, store):
        raise TokensUnavailable
    return IssuedTokens(tokens=tokens, expires_at=expires_at, ttl_seconds=ttl)


def check_tokens(*, tenant: str, principal: str, tokens: Sequence[str]) -> list[TokenStatus]:
    """Each token's status for this caller, in one round trip; :class:`TokensUnavailable`
    without Redis (an unused token cannot be told from a used one)."""
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1)
    states = _on_node(
        tenant,
        lambda client: read_token_states(
            client, tenant=tenant, principal=principal, tokens=tokens, buckets=buckets
        ),
    )
    if states is None:
        raise TokensUnavailable
    return states


def _on_node(tenant: str, call: Any) -> Any:
    # Imported here so that the Redis-level core above needs no Django app registry (the
    # engine imports its models): bench/tokens_pipeline.py runs it as a plain script.
    from idempotency.stores.nodes import run_on_node

    try:
        return run_on_node(tenant, call, op="tokens")
    except RedisError as exc:
        raise TokensUnavailable from exc
