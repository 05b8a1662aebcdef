"""Machine-readable error codes of tenant resolution (shared by the API, docs and tests)."""

from enum import StrEnum


class TenantErrorCode(StrEnum):
    API_KEY_MISSING = "API_KEY_MISSING"
    API_KEY_INVALID = "API_KEY_INVALID"
    TENANT_SUSPENDED = "TENANT_SUSPENDED"
    DINER_ID_INVALID = "DINER_ID_INVALID"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_A_MEMBER = "NOT_A_MEMBER"
