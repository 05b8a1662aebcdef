"""Machine-readable error codes of tenant resolution (shared by the API, docs and tests)."""

from enum import StrEnum


class TenantErrorCode(StrEnum):
    API_KEY_MISSING = "API_KEY_MISSING"
    API_KEY_INVALID = "API_KEY_INVALID"
    SESSION_INVALID = "SESSION_INVALID"
    SESSION_EXPIRED = "SESSION_EXPIRED"
    SESSION_REVOKED = "SESSION_REVOKED"
    TENANT_SUSPENDED = "TENANT_SUSPENDED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_A_MEMBER = "NOT_A_MEMBER"
    RATE_LIMITED = "RATE_LIMITED"
