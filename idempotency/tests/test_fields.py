"""The token API's fields take JSON values as sent, and a long list costs one length check."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from idempotency.web.fields import (
    MAX_ELEMENT_ERRORS,
    BoundedListField,
    StrictCharField,
    StrictIntegerField,
)


def refusal(field: serializers.Field, value: Any) -> Any:
    with pytest.raises(serializers.ValidationError) as refused:
        field.run_validation(value)
    return refused.value.detail


@pytest.mark.parametrize("value", ["1", "5", 1.0, 5.5, True, False, None, [], {}], ids=repr)
def test_an_integer_is_a_json_number_without_a_fraction(value: Any) -> None:
    assert StrictIntegerField().run_validation(5) == 5
    assert refusal(StrictIntegerField(), value)


@pytest.mark.parametrize("value", [1, 1.5, True, None, [], {}, ["a"]], ids=repr)
def test_text_is_a_json_string(value: Any) -> None:
    assert StrictCharField().run_validation("tok_x") == "tok_x"
    assert refusal(StrictCharField(), value)


class CountingChild(serializers.CharField):
    """A string field that counts the elements it validated."""

    validated = 0

    def run_validation(self, data: Any = serializers.empty) -> Any:
        CountingChild.validated += 1
        return super().run_validation(data)


@pytest.fixture
def counting() -> type[CountingChild]:
    CountingChild.validated = 0
    return CountingChild


def test_an_over_long_list_is_refused_before_any_element_is_validated(
    counting: type[CountingChild],
) -> None:
    # given a list of 1,000 tokens at most, sent 100,000 elements none of which is a string
    field = BoundedListField(child=counting(), max_length=1000)
    detail = refusal(field, [[]] * 100_000)
    # then one message, and no element was looked at
    assert [str(message) for message in detail] == [
        "Ensure this field has no more than 1000 elements."
    ]
    assert counting.validated == 0


def test_a_list_names_at_most_a_few_elements_errors_and_stops_there(
    counting: type[CountingChild],
) -> None:
    field = BoundedListField(child=counting(), max_length=1000)
    detail = refusal(field, [[]] * 1000)
    assert sorted(detail) == list(range(MAX_ELEMENT_ERRORS))
    assert counting.validated == MAX_ELEMENT_ERRORS


def test_a_list_within_its_bound_is_validated_whole(counting: type[CountingChild]) -> None:
    field = BoundedListField(child=counting(), max_length=3)
    assert field.run_validation(["a", "b", "c"]) == ["a", "b", "c"]
    assert counting.validated == 3
