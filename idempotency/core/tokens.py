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

**Quota.** A tenant has at most ``TOKEN_QUOTA`` tokens outstanding (issued, neither consumed
nor expired; 100,000 by default, ``TOKEN_QUOTA_FOR_TENANT`` gives a tenant its own); an issue
that would pass it is refused whole (429 ``IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED``). The count is a
ledger next to the tokens, ``idem:{t:<tenant>}:tokq``: tokens per expiry bucket of
:data:`QUOTA_BUCKET_MS`. Issuing checks and adds to it in the same Lua call that stores the
tokens (``issue_tokens.lua``, one round trip), consuming a token takes it off
(``claim_token.lua``), and a bucket is dropped once its tokens have all expired; so the count
follows expiry and use, and is never low (at most one bucket's worth of expired tokens high).
A hot tenant split into sub-buckets (``HOT_TENANT_BUCKETS``) gets one ledger per sub-bucket with
an even share of its quota; a batch of tokens is issued into one of them.

**A principal's share.** One principal alone (a guest session issuing 100 batches of 1,000)
could fill the tenant's quota and lock every other diner and the merchant out of tokens for
24 h. So each principal also has at most a share of it outstanding (:data:`PRINCIPAL_SHARE`:
1/50, 2,000 by default, at least one batch), counted in a ledger of its own beside the
tenant's (``idem:{t:<tenant>}:tokq:<principal hash>``), checked first, and
kept by the same Lua calls: both ledgers are checked and added to in one ``issue_tokens.lua``,
and a used token leaves both in ``claim_token.lua``.

**Guests' share.** Anyone holding a tenant's public key may open guest sessions, each a
principal of its own, so guests alone could still fill the quota. The ``TOKEN_QUOTA_SHARE``
hook (request -> share) holds such callers to a share of it, counted over everyone's tokens
in the tenant's ledger and checked in the same ``issue_tokens.lua`` call; callers with the
whole share go on up to the full quota (as ``RATE_LIMIT_CEILING_SHARE`` does for writes).

**Database-only mode** (no Redis, breaker open, Redis error during the claim): a validly
signed token is accepted as a plain key. The idempotency record still makes the operation run
once and replay for retries; what is lost is only "one token, one operation": the token can
also serve another endpoint, as a plain key may, then, and, since Redis never marked it used,
after Redis is back, for the rest of its lifetime. A refusal of a token
(unknown, or used on another endpoint) is recorded as its operation's answer on that endpoint,
so a copy of the refused request arriving while Redis is down replays the refusal instead of
running beside the operation the client then made with a new token. Issuing and checking need
Redis and answer 503 ``IDEMPOTENCY_TOKENS_UNAVAILABLE`` without it: a token stored nowhere
would be refused as unknown once Redis is back. Once the node's breaker half-opens, issuing and
checking are its probes, as claims are, so tokens come back with Redis, not only once other
traffic has closed the breaker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.encoding import force_bytes
from redis.commands.core import Script
from redis.exceptions import RedisError

from idempotency.core.conf import engine_hook, engine_setting
from idempotency.core.hashing import principal_digest
from idempotency.core.keys import redis_key_for
from idempotency.stores.redis_store import TokenUse

__all__ = [
    "TOKEN_PREFIX",
    "InvalidToken",
    "IssuedTokens",
    "QuotaExceeded",
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
QUOTA_BUCKET_MS = 60_000  # width of the quota ledger's expiry buckets


class InvalidToken(ValueError):
    """Malformed, forged, or issued to another tenant or principal."""


class TokensUnavailable(Exception):
    """The tenant's Redis node cannot be used now (not configured, breaker open, error)."""


class QuotaExceeded(Exception):
    """Issuing would pass the tenant's quota of outstanding tokens (``scope`` "tenant"), the
    principal's share of it ("principal"), or the share of the tenant's quota this caller may
    fill ("tenant_share", ``TOKEN_QUOTA_SHARE``: a guest); nothing was issued."""

    def __init__(self, *, limit: int, retry_after_seconds: int, scope: str = "tenant") -> None:
        super().__init__(f"the quota of {limit} outstanding tokens is reached")
        self.limit = limit
        self.retry_after_seconds = retry_after_seconds
        self.scope = scope

    @property
    def per_principal(self) -> bool:
        return self.scope == "principal"


@dataclass(frozen=True)
class StoreResult:
    """What ``issue_tokens.lua`` answered: stored, or refused by a quota (``refused_by``:
    "principal", "tenant" or "tenant_share")."""

    stored: bool
    outstanding: int
    retry_after_ms: int = 0
    refused_by: str | None = None


class TokenStatus(StrEnum):
    UNUSED = "unused"
    USED = "used"
    # signed by us for this caller, but not in Redis: expired unused, never issued, or lost with
    # Redis's data (a used one then still replays from the database on its endpoint)
    UNKNOWN = "unknown"
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
    *,
    tenant: str,
    principal: str,
    count: int,
    secret: str | bytes | None = None,
    buckets: int = 1,
    sub_bucket: int | None = None,
) -> list[str]:
    """``count`` fresh signed tokens (not stored yet); with ``sub_bucket``, only tokens whose
    keys fall into that one of the tenant's ``buckets`` (drawn again until they do: about
    ``buckets`` signatures per token), so that one script call can store them all in one
    cluster slot."""
    tokens: list[str] = []
    while len(tokens) < count:
        token = sign_token(
            tenant=tenant,
            principal=principal,
            token_id=_b64(secrets.token_bytes(_ID_BYTES)),
            secret=secret,
        )
        if sub_bucket is None or _tag(tenant, token, buckets) == f"{{t:{tenant}:{sub_bucket}}}":
            tokens.append(token)
    return tokens


def _tag(tenant: str, token: str, buckets: int) -> str:
    """The hash tag of every claim key made from ``token`` (sub-bucket included)."""
    if buckets > 1:
        claim_key = redis_key_for(tenant=tenant, scope="", key=token, buckets=buckets)
        return claim_key[claim_key.index("{") : claim_key.index("}") + 1]
    return f"{{t:{tenant}}}"  # what redis_key_for gives without buckets, minus two hashes


def token_key(*, tenant: str, token: str, buckets: int = 1, namespace: str = "idem") -> str:
    """``<namespace>:{t:<tenant>}:tok:<id>``, under the very hash tag of every claim key made
    from this token (sub-bucket included), so ``claim_token.lua`` touches one slot."""
    token_id = token[len(TOKEN_PREFIX) :].split(".", 1)[0]
    return f"{namespace}:{_tag(tenant, token, buckets)}:tok:{token_id}"


def quota_key(*, tenant: str, token: str, buckets: int = 1, namespace: str = "idem") -> str:
    """The quota ledger that counts ``token``: ``<namespace>:{t:<tenant>}:tokq``, one per
    sub-bucket of a hot tenant, beside the tokens it counts."""
    return f"{namespace}:{_tag(tenant, token, buckets)}:tokq"


def principal_quota_key(
    *, tenant: str, token: str, principal: str, buckets: int = 1, namespace: str = "idem"
) -> str:
    """The ledger of ``principal``'s outstanding tokens beside :func:`quota_key`'s (same hash
    tag): ``<namespace>:{t:<tenant>}:tokq:<principal hash>``, the keyed principal hash the
    rate counters use (:func:`~idempotency.core.hashing.principal_digest`), so erasing a
    principal finds it."""
    digest = principal_digest(principal)[:16]
    return f"{quota_key(tenant=tenant, token=token, buckets=buckets, namespace=namespace)}:{digest}"


def token_use(
    *, tenant: str, principal: str, token: str, claim_key: str, mark_ttl_seconds: int, buckets: int
) -> TokenUse:
    """What the claim of ``claim_key`` needs to consume ``token`` (already verified)."""
    return TokenUse(
        key=token_key(tenant=tenant, token=token, buckets=buckets),
        unused_value=_UNUSED + principal,
        used_value=_USED + claim_key,
        mark_ttl_ms=mark_ttl_seconds * 1000,
        quota_key=quota_key(tenant=tenant, token=token, buckets=buckets),
        quota_bucket_ms=QUOTA_BUCKET_MS,
        principal_quota_key=principal_quota_key(
            tenant=tenant, token=token, principal=principal, buckets=buckets
        ),
    )


@cache
def _issue_script() -> Script:
    source = resources.files("idempotency.scripts").joinpath("lua", "issue_tokens.lua")
    return Script(None, source.read_bytes())  # type: ignore[arg-type]


def store_tokens(
    client: Any,
    *,
    tenant: str,
    principal: str,
    tokens: Sequence[str],
    ttl_seconds: int,
    buckets: int = 1,
    namespace: str = "idem",
    limit: int | None = None,
    bucket_ms: int = QUOTA_BUCKET_MS,
    principal_limit: int | None = None,
    share_limit: int | None = None,
) -> StoreResult:
    """Store ``tokens`` as unused, each under its own key with a TTL, and count them in the
    quota ledgers of their hash tag, the tenant's and the principal's: one Lua call per tag
    (tokens from :func:`new_tokens` with a ``sub_bucket`` share one tag: one round trip). With
    ``limit`` (the tenant's ledger) or ``principal_limit`` (the principal's), tokens that would
    bring a ledger's outstanding count above it are refused together and nothing is stored;
    ``share_limit`` is a lower limit on the tenant's ledger for this caller alone (a guest's
    share of the quota), checked in the same call, so the others may go on up to ``limit``.
    ``bucket_ms`` is the ledgers' bucket width (what ``claim_token.lua`` is told on use)."""
    groups: dict[str, list[str]] = {}
    for token in tokens:
        groups.setdefault(_tag(tenant, token, buckets), []).append(token)
    if (limit, principal_limit, share_limit) != (None, None, None) and len(groups) > 1:
        raise ValueError("tokens under a limit must share one hash tag (new_tokens(sub_bucket=))")
    result = StoreResult(stored=True, outstanding=0)
    for group in groups.values():
        keys = [
            quota_key(tenant=tenant, token=group[0], buckets=buckets, namespace=namespace),
            principal_quota_key(
                tenant=tenant,
                token=group[0],
                principal=principal,
                buckets=buckets,
                namespace=namespace,
            ),
        ]
        keys += [
            token_key(tenant=tenant, token=token, buckets=buckets, namespace=namespace)
            for token in group
        ]
        args = [-1 if limit is None else limit, ttl_seconds * 1000, _UNUSED + principal]
        args += [bucket_ms, -1 if principal_limit is None else principal_limit]
        args.append(-1 if share_limit is None else share_limit)
        stored, outstanding, third, *refused_by = _issue_script()(
            keys=keys, args=args, client=client
        )
        if not stored:
            return StoreResult(
                stored=False,
                outstanding=int(outstanding),
                retry_after_ms=third,
                refused_by=refused_by[0].decode() if refused_by else None,
            )
        result = StoreResult(stored=True, outstanding=int(outstanding))
    return result


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


def issue_tokens(
    *, tenant: str, principal: str, count: int, share: float | None = None
) -> IssuedTokens:
    """Issue ``count`` tokens to ``principal`` on the tenant's node, or raise
    :class:`QuotaExceeded` or :class:`TokensUnavailable`. ``share`` (below 1: the
    ``TOKEN_QUOTA_SHARE`` hook's answer for a guest) is the part of the tenant's quota this
    caller may fill, counting every principal's tokens: guests, each a principal anyone with
    the public key can open, cannot leave the merchant without tokens. ``expires_at`` is taken
    before storing, so it is never later than the keys' real expiry."""
    if not 1 <= count <= engine_setting("TOKEN_MAX_BATCH"):
        raise ValueError(f"count must be 1..{engine_setting('TOKEN_MAX_BATCH')}")
    ttl = int(engine_setting("TOKEN_TTL_SECONDS"))
    expires_at = timezone.now() + timedelta(seconds=ttl)
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1)
    sub_bucket = secrets.randbelow(buckets) if buckets > 1 else None
    tokens = new_tokens(
        tenant=tenant, principal=principal, count=count, buckets=buckets, sub_bucket=sub_bucket
    )
    quota = token_quota(tenant)
    limits = {"tenant": quota, "principal": principal_token_quota(quota)}
    share_limit = None
    if share is not None and share < 1:
        limits["tenant_share"] = quota_share(quota, share)
        share_limit = quota_share(math.ceil(quota / buckets), share)

    def store(client: Any) -> StoreResult:
        return store_tokens(
            client,
            tenant=tenant,
            principal=principal,
            tokens=tokens,
            ttl_seconds=ttl,
            buckets=buckets,
            limit=math.ceil(quota / buckets),
            principal_limit=math.ceil(limits["principal"] / buckets),
            share_limit=share_limit,
        )

    result = _on_node(tenant, store)
    if result is None:
        raise TokensUnavailable
    if not result.stored:
        scope = result.refused_by or "tenant"
        raise QuotaExceeded(
            limit=limits[scope],
            retry_after_seconds=max(1, math.ceil(result.retry_after_ms / 1000)),
            scope=scope,
        )
    return IssuedTokens(tokens=tokens, expires_at=expires_at, ttl_seconds=ttl)


def token_quota(tenant: str) -> int:
    """The tenant's quota of outstanding tokens: its own (``TOKEN_QUOTA_FOR_TENANT``), else
    ``TOKEN_QUOTA``."""
    lookup = engine_hook("TOKEN_QUOTA_FOR_TENANT")
    own = lookup(tenant) if lookup is not None else None
    return int(own or engine_setting("TOKEN_QUOTA"))


def quota_share(quota: int, share: float) -> int:
    """The part of ``quota`` a caller with ``share`` may fill: rounded up, at least 1 (0.8 of
    2,000 is 1,600), as a share of the write ceiling is (``ratelimit.ceiling_share``)."""
    # rounded first so that float noise (20 * 0.7 = 14.000000000000002) does not add one
    return max(1, math.ceil(round(quota * share, 9)))


PRINCIPAL_SHARE = 50
"""A principal may hold 1/``PRINCIPAL_SHARE`` of its tenant's quota (2,000 of the default
100,000; a tenant's own quota scales it) and always at least one full batch. A constant for
now: a setting of its own belongs in ``core/conf.py`` and ``checks.py``."""


def principal_token_quota(quota: int) -> int:
    """The most tokens one principal may hold outstanding under a tenant quota of ``quota``."""
    return max(int(engine_setting("TOKEN_MAX_BATCH")), math.ceil(quota / PRINCIPAL_SHARE))


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
        return run_on_node(tenant, call, op="tokens", may_probe=True)
    except RedisError as exc:
        raise TokensUnavailable from exc
