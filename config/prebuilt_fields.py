"""Input serializers whose fields are built once per class instead of once per request.

DRF gives every serializer instance its own copy of the declared fields
(``Serializer.get_fields`` deep-copies them), and a field's deep copy calls its constructor
again (``Field.__deepcopy__``): every request rebuilds each field's validators, error messages
and choice maps. For the order's input (``ordering.api.serializers.PlaceOrderInSerializer``:
three serializers, nine declared fields) that was about 360 µs of a worker's CPU per order,
measured in the running request (``docs/benchmarks.md``, the causes table).

:class:`PrebuiltFieldsSerializer` builds each plain field once per class, with its validators
already resolved, and gives every instance a shallow copy of it to bind. Binding sets only the
copy's own attributes (name, parent, label, source), and validating reads a field without
changing it, so instances share nothing that one of them writes. Three kinds of field are
still deep-copied, as DRF does: nested serializers (they hold per-instance state such as
``initial_data``; a nested serializer of this class gets its own fields the same way), fields
that bind a field of their own (``ListField``'s ``child``: a shared child would stay bound to
the prototype, not to the instance), and a field whose ``default`` or ``initial`` is a mutable
value, which a caller could change in the validated data. A serializer that changes its fields
per instance (e.g. in ``__init__``) must not use this class: the fields it would change are
shared.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from rest_framework import serializers
from rest_framework.fields import Field, empty

# values that cannot be changed in place, so one object may serve every instance
_IMMUTABLE = (str, bytes, int, float, bool, Decimal, frozenset, type(None))

# the class attribute holding a serializer class's own declared fields, each built once
# (None: deep-copied per instance); kept on the class, so it goes when the class goes
_PROTOTYPES = "_prebuilt_field_prototypes"


# No docstring: drf-spectacular would publish it as the description of every subclass that has
# none of its own (inspect.getdoc inherits).
class PrebuiltFieldsSerializer(serializers.Serializer):
    def get_fields(self) -> dict[str, Field]:
        cls = type(self)
        prototypes = cls.__dict__.get(_PROTOTYPES)  # the class's own, never a base class's
        if prototypes is None:
            # built by whichever thread gets here first; a concurrent build makes an equal
            # dict, and the last one stored wins
            prototypes = _prototypes(self._declared_fields)
            setattr(cls, _PROTOTYPES, prototypes)
        return {
            name: _bindable_copy(prototype)
            if prototype is not None
            else copy.deepcopy(self._declared_fields[name])
            for name, prototype in prototypes.items()
        }


def _prototypes(declared: dict[str, Field]) -> dict[str, Field | None]:
    built: dict[str, Field | None] = {}
    for name, field in declared.items():
        if not _shareable(field):
            built[name] = None
            continue
        prototype = copy.deepcopy(field)  # unbound, as DRF's own copy would be
        prototype.validators  # noqa: B018 (resolved once here, shared by every copy)
        built[name] = prototype
    return built


def _shareable(field: Field) -> bool:
    """Whether one built field may serve every instance through shallow copies: not a
    serializer, no field bound inside it, and no value it hands out that could be changed."""
    if isinstance(field, serializers.BaseSerializer):
        return False
    if getattr(field, "child", None) is not None or hasattr(field, "child_relation"):
        return False
    return all(
        value is empty or callable(value) or isinstance(value, _IMMUTABLE)
        for value in (field.default, field.initial)
    )


def _bindable_copy(prototype: Field) -> Field:
    """A new field object with the prototype's attributes, for one instance to bind.
    (``copy.copy`` would do the same through ``__reduce_ex__``, at several times the cost.)"""
    clone: Any = object.__new__(type(prototype))
    clone.__dict__.update(prototype.__dict__)
    return clone
