"""The bounds of a nested list in the OpenAPI schema.

drf-spectacular describes a nested serializer with ``many=True`` as a bare array: an order's
``items`` (``allow_empty=False``, ``max_length=MAX_LINES``) showed neither bound, so a client
generated from the schema learned of them only from a 400. This adds ``minItems`` and
``maxItems`` from the list serializer's own arguments, so the schema says what the server
enforces.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension


class BoundedListSerializer(OpenApiSerializerFieldExtension):
    target_class = "rest_framework.serializers.ListSerializer"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if schema.get("type") != "array":
            return schema
        if not self.target.allow_empty:
            schema["minItems"] = max(1, self.target.min_length or 0)
        elif self.target.min_length is not None:
            schema["minItems"] = self.target.min_length
        if self.target.max_length is not None:
            schema["maxItems"] = self.target.max_length
        return schema
