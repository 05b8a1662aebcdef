"""Input serializers with fields built once per class (config/prebuilt_fields.py): they
validate exactly as DRF's own, rebuild no field per instance, and share nothing an instance
writes."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
from rest_framework import serializers
from rest_framework.fields import Field

from config.prebuilt_fields import PrebuiltFieldsSerializer
from ordering.api.serializers import PlaceOrderInSerializer

ORDER_INPUTS = {
    "one line": {"items": [{"dish_id": 7, "quantity": 2}], "payment_method": "card"},
    "everything": {
        "items": [{"dish_id": 7, "quantity": 2}, {"dish_id": 8, "quantity": 1}],
        "payment_method": "wallet",
        "coupon_code": "  TEN ",
        "note": "no onions",
        "contact": {"phone": "+1 (555) 010-0100", "address": "1 Main St"},
    },
    "no items": {"items": [], "payment_method": "card"},
    "numbers as strings": {
        "items": [{"dish_id": "8", "quantity": "1"}],
        "payment_method": "card",
        "note": 5,
    },
    "items missing": {"payment_method": "card"},
    "unknown payment method": {"items": [{"dish_id": 7, "quantity": 1}], "payment_method": "iou"},
    "quantity zero and dish id a word": {
        "items": [{"dish_id": "seven", "quantity": 0}],
        "payment_method": "card",
    },
    "phone of letters": {
        "items": [{"dish_id": 7, "quantity": 1}],
        "payment_method": "cash",
        "contact": {"phone": "call me"},
    },
    "note too long": {
        "items": [{"dish_id": 7, "quantity": 1}],
        "payment_method": "card",
        "note": "x" * 501,
    },
    "items not a list": {"items": {"dish_id": 7}, "payment_method": "card"},
}


def outcome(data: Any) -> tuple[bool, Any, Any]:
    serializer = PlaceOrderInSerializer(data=data)
    valid = serializer.is_valid()
    return valid, serializer.validated_data if valid else None, serializer.errors


@pytest.mark.parametrize("data", ORDER_INPUTS.values(), ids=ORDER_INPUTS.keys())
def test_the_order_input_validates_as_drf_builds_it(data, monkeypatch):
    # given what the order's input serializer answers with its fields built once
    outcome(data)  # the classes' fields are built by now
    prebuilt = outcome(data)
    # when DRF builds every field per instance instead, at every level
    monkeypatch.setattr(PrebuiltFieldsSerializer, "get_fields", serializers.Serializer.get_fields)
    drf = outcome(data)
    # then the answer is the same: valid or not, the same data, the same errors (an
    # ErrorDetail compares its code too)
    assert prebuilt == drf


@pytest.fixture
def constructed(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    """The class of every field constructed while the test runs."""
    made: list[type] = []
    real = Field.__init__

    def counting(self: Field, *args: Any, **kwargs: Any) -> None:
        made.append(type(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(Field, "__init__", counting)
    return made


def test_no_plain_field_is_constructed_per_instance(constructed):
    # given the order's input serializer, used once already
    outcome(ORDER_INPUTS["everything"])
    constructed.clear()
    # when another instance validates an order
    assert outcome(ORDER_INPUTS["everything"])[0]
    # then the only objects constructed are the serializers (the instance, the items' list
    # and its child, the contact): every plain field is a copy of one built before
    assert sorted(cls.__name__ for cls in constructed) == [
        "ContactInSerializer",
        "ItemInSerializer",
        "ListSerializer",
        "PlaceOrderInSerializer",
    ]
    # and no validator list is built again either
    again = PlaceOrderInSerializer(data={}).fields["payment_method"]
    assert again.validators is PlaceOrderInSerializer(data={}).fields["payment_method"].validators


def test_each_instance_binds_fields_of_its_own():
    # given two instances of the order's input serializer
    first, second = PlaceOrderInSerializer(data={}), PlaceOrderInSerializer(data={})
    # then no field object is shared, and each is bound to its own instance
    for name in first.fields:
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second
    first_item = first.fields["items"].child.fields["quantity"]
    assert first_item is not second.fields["items"].child.fields["quantity"]
    assert first_item.root is first


def test_a_field_inside_a_field_belongs_to_its_instance():
    # given two instances of a serializer with a list of strings (one whose initial value is
    # not a list, so only the field inside it keeps it from being shared)
    class NoneFirst(serializers.ListField):
        initial = None

    class Labels(PrebuiltFieldsSerializer):
        labels = NoneFirst(child=serializers.CharField())

    first, second = Labels(data={}, context={"n": 1}), Labels(data={}, context={"n": 2})
    # then each list's child field reaches its own instance, and so its context
    assert first.fields["labels"].child.root is first
    assert second.fields["labels"].child.context == {"n": 2}


def test_a_subclass_builds_its_own_fields():
    # given a serializer whose subclass declares one more field, the base used first
    class Base(PrebuiltFieldsSerializer):
        name = serializers.CharField()

    class WithAge(Base):
        age = serializers.IntegerField()

    assert list(Base(data={}).fields) == ["name"]
    # then the subclass has its own fields, not its base's
    assert list(WithAge(data={}).fields) == ["name", "age"]
    assert list(Base(data={}).fields) == ["name"]


def test_a_serializer_class_made_at_run_time_is_not_kept_alive():
    # given a serializer class made and used at run time, then dropped
    class Passing(PrebuiltFieldsSerializer):
        name = serializers.CharField()

    assert Passing(data={"name": "x"}).is_valid()
    gone = weakref.ref(Passing)
    del Passing
    gc.collect()
    # then nothing of the prebuilt fields holds on to it
    assert gone() is None


class Tagged(PrebuiltFieldsSerializer):
    kind = serializers.CharField(default="none")
    tags = serializers.ListField(child=serializers.CharField(), default=["new"])
    extra = serializers.JSONField(default={"seen": False})


def test_a_mutable_default_is_not_shared_between_instances():
    # given one instance that changes the defaults it was handed
    first = Tagged(data={})
    assert first.is_valid(), first.errors
    first.validated_data["tags"].append("changed")
    first.validated_data["extra"]["seen"] = True
    # when another instance takes the defaults
    second = Tagged(data={})
    assert second.is_valid(), second.errors
    # then it gets them as declared
    assert second.validated_data == {"kind": "none", "tags": ["new"], "extra": {"seen": False}}


def test_concurrent_instances_each_validate_their_own_input():
    # given 8 threads, each validating orders of its own dish and quantity at the same time
    results: dict[int, list[Any]] = {}
    start = threading.Barrier(8)

    def validate(worker: int) -> None:
        start.wait()
        seen = []
        for n in range(200):
            data = {
                "items": [{"dish_id": worker + 1, "quantity": n + 1}],
                "payment_method": "card",
                "note": f"{worker}-{n}",
            }
            serializer = PlaceOrderInSerializer(data=data)
            assert serializer.is_valid(), serializer.errors
            item = serializer.validated_data["items"][0]
            seen.append((item["dish_id"], item["quantity"], serializer.validated_data["note"]))
        results[worker] = seen

    threads = [threading.Thread(target=validate, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then every thread read back exactly what it sent
    assert sorted(results) == list(range(8))
    for worker, seen in results.items():
        assert seen == [(worker + 1, n + 1, f"{worker}-{n}") for n in range(200)]
