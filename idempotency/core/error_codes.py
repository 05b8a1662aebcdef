"""Error codes of the idempotency contract (DESIGN §4), shared by the engine, docs and tests."""

from enum import StrEnum


class IdempotencyErrorCode(StrEnum):
    KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"  # 400
    KEY_MISSING = "IDEMPOTENCY_KEY_MISSING"  # 400
    KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"  # 422
    IN_PROGRESS = "IDEMPOTENCY_REQUEST_IN_PROGRESS"  # 409 + Retry-After
    PAYLOAD_INVALID = "IDEMPOTENCY_PAYLOAD_INVALID"  # 400: the body has no canonical form
    # 400: the SCOPE_RESOLVER gave a tenant longer than the records keep (MAX_TENANT_LENGTH)
    TENANT_INVALID = "IDEMPOTENCY_TENANT_INVALID"
    # 400: the SCOPE_RESOLVER gave a principal holding "|", the scope's separator
    PRINCIPAL_INVALID = "IDEMPOTENCY_PRINCIPAL_INVALID"
    # Pre-issued tokens (idempotency/core/tokens.py)
    TOKEN_INVALID = "IDEMPOTENCY_TOKEN_INVALID"  # 400: malformed, forged, or another caller's
    TOKEN_USED = "IDEMPOTENCY_TOKEN_USED"  # 409: already consumed on another endpoint
    TOKEN_UNKNOWN = "IDEMPOTENCY_TOKEN_UNKNOWN"  # 422: expired (or never stored)
    TOKENS_UNAVAILABLE = "IDEMPOTENCY_TOKENS_UNAVAILABLE"  # 503 + Retry-After: Redis is down
    # 429 + Retry-After: the tenant's quota of outstanding tokens is reached
    TOKEN_QUOTA_EXCEEDED = "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED"
    # Write rate limit (idempotency/core/ratelimit.py); the same code DRF's Throttled maps to.
    RATE_LIMITED = "RATE_LIMITED"  # 429 + Retry-After
