"""What a tenant may decide about its diners' data, checked against the platform's bounds.

The fields live on :class:`tenants.models.Tenant` and are edited in the admin; a value out of
bounds is refused there with a message that names the bound (``docs/data-protection.md``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from idempotency.core.redaction import check_paths

# Bounds of what staff type into a tenant's JSON fields, which only the request's size
# (MAX_REQUEST_BYTES) bounded: 100,000 paths, or one of 750,000 characters, were kept on the
# tenant's row, and every stored reply of its writes walked each path. An API's answer has a
# few personal fields; a path is a few keys deep.
MAX_REDACTION_PATHS = 50
MAX_REDACTION_PATH_CHARS = 200


def validate_redaction_paths(value: Any) -> None:
    """A list of JSON paths (``contact.phone``), each object keys joined by dots; at most
    :data:`MAX_REDACTION_PATHS`, each of at most :data:`MAX_REDACTION_PATH_CHARS` characters."""
    if not isinstance(value, list):
        raise ValidationError('Enter a list of JSON paths, e.g. ["contact.phone", "note"].')
    if len(value) > MAX_REDACTION_PATHS or any(
        isinstance(path, str) and len(path) > MAX_REDACTION_PATH_CHARS for path in value
    ):
        raise ValidationError(
            f"At most {MAX_REDACTION_PATHS} paths, each of at most {MAX_REDACTION_PATH_CHARS} "
            "characters.",
            code="out_of_platform_bounds",
        )
    try:
        check_paths(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _within(value: int | None, *, low: int, high: int, what: str, unit: str) -> None:
    if value is not None and not low <= value <= high:
        raise ValidationError(
            f"{what} must be between {low} and {high} {unit} (the platform's bounds).",
            code="out_of_platform_bounds",
            params={"value": value, "min": low, "max": high},
        )


def validate_record_ttl_hours(value: int | None) -> None:
    """Within ``RETENTION_RECORD_TTL_HOURS_MIN`` .. ``_MAX``: long enough for clients' retries,
    short enough for the platform's promise."""
    _within(
        value,
        low=settings.RETENTION_RECORD_TTL_HOURS_MIN,
        high=settings.RETENTION_RECORD_TTL_HOURS_MAX,
        what="The replay record TTL",
        unit="hours",
    )


def validate_audit_retention_days(value: int | None) -> None:
    """Within ``RETENTION_AUDIT_DAYS_MIN`` .. ``_MAX``."""
    _within(
        value,
        low=settings.RETENTION_AUDIT_DAYS_MIN,
        high=settings.RETENTION_AUDIT_DAYS_MAX,
        what="The duplicate-audit retention",
        unit="days",
    )


def validate_log_fields(value: Any) -> None:
    """A list of the log fields a tenant may keep (``LOG_FIELDS_TENANT_MAY_KEEP``)."""
    allowed = settings.LOG_FIELDS_TENANT_MAY_KEEP
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError('Enter a list of log field names, e.g. ["request_id"].')
    if len(set(value)) != len(value):  # else 75,000 of one name fitted in a request
        raise ValidationError("Name each log field once.", code="out_of_platform_bounds")
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValidationError(
            f"{', '.join(unknown)}: not a log field a tenant may keep "
            f"(the platform allows {', '.join(allowed)}).",
            code="out_of_platform_bounds",
        )
