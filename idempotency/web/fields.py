"""DRF fields of the token API whose cost is bounded by their declared bounds.

DRF's ``ListField`` validates every element before it checks
``max_length`` (a validator, run after), and lists an error for each element that fails: a 1 MB
body of 350,000 ``[]`` in a list of at most 1,000 tokens cost seconds of validation and an
11 MB error answer. :class:`BoundedListField` refuses an over-long list before it looks at an
element, and names at most :data:`MAX_ELEMENT_ERRORS` elements' errors.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

MAX_ELEMENT_ERRORS = 10
"""The most elements of one list whose errors an error answer names (validation stops there)."""


class BoundedListField(serializers.ListField):
    """A ``ListField`` whose ``max_length`` is checked before any element is validated, and
    whose error names at most :data:`MAX_ELEMENT_ERRORS` elements."""

    def to_internal_value(self, data: Any) -> list[Any]:
        if isinstance(data, list) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        result: list[Any] = []
        errors: dict[int, Any] = {}
        for index, item in enumerate(data):
            try:
                result.append(self.child.run_validation(item))
            except serializers.ValidationError as exc:
                errors[index] = exc.detail
                if len(errors) == MAX_ELEMENT_ERRORS:
                    break
        if errors:
            raise serializers.ValidationError(errors)
        return result
