"""Error codes of the idempotency contract (DESIGN §4), shared by the engine, docs and tests."""

from enum import StrEnum


class IdempotencyErrorCode(StrEnum):
    KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"  # 400
    KEY_MISSING = "IDEMPOTENCY_KEY_MISSING"  # 400
    KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"  # 422
    IN_PROGRESS = "IDEMPOTENCY_REQUEST_IN_PROGRESS"  # 409 + Retry-After
