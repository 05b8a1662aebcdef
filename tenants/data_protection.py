"""What a tenant may decide about its diners' data, checked against the platform's bounds.

The fields live on :class:`tenants.models.Tenant` and are edited in the admin; a value out of
bounds is refused there with a message that names the bound (``docs/data-protection.md``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from idempotency.core.redaction import check_paths


def validate_redaction_paths(value: Any) -> None:
    """A list of JSON paths (``contact.phone``), each object keys joined by dots."""
    if not isinstance(value, list):
        raise ValidationError('Enter a list of JSON paths, e.g. ["contact.phone", "note"].')
    try:
        check_paths(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
