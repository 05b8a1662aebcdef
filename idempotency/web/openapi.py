"""OpenAPI pieces for endpoints behind the engine: the problem+json error shape, the headers of
the idempotency contract, and the API-key security scheme hook (drf-spectacular)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

PROBLEM_JSON = "application/problem+json"

_DESCRIPTIONS = {
    400: "Invalid input, key or body (see `code`)",
    401: "API key missing, malformed, unknown or revoked",
    403: "Tenant suspended, or not allowed for this API client",
    404: "Not found for this caller",
    409: "Conflict: state changed, stock, or the same key still in progress",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Idempotency key reused with another payload, or a business refusal",
    429: "Write rate limit reached (Retry-After)",
    503: "Temporarily unavailable (Retry-After)",
}


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details with a machine-readable ``code``."""

    code = serializers.CharField()
    detail = serializers.CharField()
    status = serializers.IntegerField()
    errors = serializers.JSONField(required=False, help_text="Field errors (VALIDATION_ERROR)")


def problems(*statuses: int) -> dict[Any, OpenApiResponse]:
    """Responses entries for these error statuses, as ``application/problem+json``."""
    return {
        (status, PROBLEM_JSON): OpenApiResponse(
            ProblemSerializer, description=_DESCRIPTIONS[status]
        )
        for status in statuses
    }


IDEMPOTENCY_KEY_REQUIRED = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable ASCII characters; reuse it for every retry of the operation.",
)
IDEMPOTENCY_KEY_OPTIONAL = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="Optional here: without one, identical requests within 60 s replay the first.",
)
