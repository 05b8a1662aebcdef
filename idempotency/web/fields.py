"""DRF fields that take a JSON value as it was sent: no coercion, and a bounded cost.

**No coercion.** DRF's ``IntegerField`` turns ``"1"``, ``1.0`` and ``true`` into ``1``, and its
``CharField`` turns ``1`` into ``"1"``. The fingerprint does not (``"1"`` and ``1`` are different
operations to it), so a client that sent an operation once as a string and once as a number
under one key got 422 ``IDEMPOTENCY_KEY_REUSED`` for what the view had read as the same input.
Here an integer is a JSON number without a fraction, and text is a JSON string; anything else
is the field's ``invalid`` error (400 ``VALIDATION_ERROR``).

**A bounded cost.** DRF's ``ListField`` validates every element before it checks
``max_length`` (a validator, run after), and lists an error for each element that fails: a 1 MB
body of 350,000 ``[]`` in a list of at most 1,000 tokens cost seconds of validation and an
11 MB error answer. :class:`BoundedListField` refuses an over-long list before it looks at an
element, and names at most :data:`MAX_ELEMENT_ERRORS` elements' errors.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from rest_framework import serializers

MAX_ELEMENT_ERRORS = 10
"""The most elements of one list whose errors an error answer names (validation stops there)."""


class StrictIntegerField(serializers.IntegerField):
    """An integer only as a JSON number without a fraction: not a string, a float or a
    boolean (``bool`` is an ``int`` in Python, and DRF would read ``true`` as 1)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class _StringOnly:
    """Text only as a JSON string (DRF's text fields read a number as its digits)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(_StringOnly, serializers.CharField):
    """A ``CharField`` that takes JSON strings only."""


class StrictRegexField(_StringOnly, serializers.RegexField):
    """A ``RegexField`` that takes JSON strings only, and only when the pattern matches the
    whole string. Django's ``RegexValidator`` searches, and in Python ``$`` also matches before
    a final line break: ``^[a-z]{1,64}$`` let ``"alice\\n"`` through (a field that keeps
    whitespace, such as a diner id, then stored it), where the same pattern in the OpenAPI
    schema, a JSON Schema (ECMA-262) pattern, refuses it."""

    def __init__(self, regex: str | re.Pattern[str], **kwargs: Any) -> None:
        super().__init__(regex, **kwargs)
        self.validators = [
            _WholeMatch(v.regex, message=v.message) if isinstance(v, RegexValidator) else v
            for v in self.validators
        ]


class _WholeMatch(RegexValidator):
    """A ``RegexValidator`` that needs the pattern to match the whole value."""

    def __call__(self, value: Any) -> None:
        if self.regex.fullmatch(str(value)) is None:
            raise ValidationError(self.message, code=self.code, params={"value": value})


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
