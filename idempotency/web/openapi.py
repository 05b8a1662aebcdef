"""OpenAPI pieces for endpoints behind the engine: the problem+json error shape and the headers
of the idempotency contract, the key sent and the answers' (drf-spectacular)."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from idempotency.core.conf import engine_setting
from idempotency.core.keys import AUTO_KEY_PREFIX, MAX_KEY_LENGTH

PROBLEM_JSON = "application/problem+json"

# The engine's general wording; a host names its own refusals through the setting
# PROBLEM_DESCRIPTIONS (its tenants, its resources), which takes precedence
_DESCRIPTIONS = {
    400: "Invalid input, key or body (see `code`)",
    401: "Credentials missing, malformed, unknown, expired or revoked (see `code`)",
    403: "Not allowed for this caller (see `code`)",
    404: "Not found for this caller",
    409: "Conflict: the resource's state, or the same key still in progress (see `code`)",
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
    errors = serializers.JSONField(required=False, help_text="Field errors, on invalid input")


def problems(*statuses: int) -> dict[Any, OpenApiResponse]:
    """Responses entries for these error statuses, as ``application/problem+json``, each
    described in the host's words where it gave some (``PROBLEM_DESCRIPTIONS``)."""
    descriptions = {**_DESCRIPTIONS, **engine_setting("PROBLEM_DESCRIPTIONS")}
    return {
        (status, PROBLEM_JSON): OpenApiResponse(ProblemSerializer, description=descriptions[status])
        for status in statuses
    }


# 1-255 printable ASCII characters but a comma, not starting with the automatic keys' prefix
# (idempotency.core.keys: such a key is refused 400 IDEMPOTENCY_KEY_INVALID, and a pattern that
# admitted it had a generated client send a key it took for valid)
_KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_KEY_LENGTH,
    # HTTP strips a header value's outer spaces, so the key never starts or ends with one
    "pattern": f"^(?!{re.escape(AUTO_KEY_PREFIX)})"
    "[\\x21-\\x2b\\x2d-\\x7e]([\\x20-\\x2b\\x2d-\\x7e]*[\\x21-\\x2b\\x2d-\\x7e])?$",
}

IDEMPOTENCY_KEY_REQUIRED = OpenApiParameter(
    "Idempotency-Key",
    _KEY_SCHEMA,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable ASCII characters (no comma, not starting with auto:); reuse it "
    "for every retry of the operation.",
)


def idempotency_key_optional(window_seconds: int) -> OpenApiParameter:
    """The key of an endpoint where it is optional (``auto_key_window``): without one, an
    identical request within ``window_seconds`` replays the first."""
    return OpenApiParameter(
        "Idempotency-Key",
        _KEY_SCHEMA,
        OpenApiParameter.HEADER,
        required=False,
        description=f"Optional here: without one, identical requests within {window_seconds} s "
        "replay the first.",
    )


# Refusals a view gives under a key, kept and replayed as the key's answer (a 409 or 422 of the
# engine's own, IN_PROGRESS or REUSED, carries the header too).
KEPT_REFUSALS = (400, 404, 409, 422)


def answer_headers(*successes: int) -> list[OpenApiParameter]:
    """The headers the engine puts on an operation's answers: on its success statuses
    ``successes`` and on the refusals it keeps as the key's answer (400, 404, 409, 422) whether
    it ran or was replayed (and what a replay left out), and on a refusal that asks for a wait,
    how long."""
    ran_or_replayed = list(successes)
    kept = [*ran_or_replayed, *KEPT_REFUSALS]
    return [
        OpenApiParameter(
            "X-Idempotent-Result",
            {"type": "string", "enum": ["MISS", "HIT", "IN_PROGRESS", "REUSED"]},
            OpenApiParameter.HEADER,
            response=kept,
            description="MISS: this request ran the operation; HIT: the first answer to this "
            "key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first "
            "request with this key is still running; REUSED (422): the key was sent with "
            "another payload. A success answer without it is not the API's.",
        ),
        OpenApiParameter(
            "Idempotent-Replayed",
            {"type": "string", "enum": ["true"]},
            OpenApiParameter.HEADER,
            response=kept,
            description="On a replay only.",
        ),
        OpenApiParameter(
            "Idempotency-Redacted",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=ran_or_replayed,
            description="On a replay that left personal fields null: their JSON paths, "
            "comma-separated.",
        ),
        OpenApiParameter(
            "Retry-After",
            RETRY_AFTER_SCHEMA,
            OpenApiParameter.HEADER,
            response=[409],
            description="On IDEMPOTENCY_REQUEST_IN_PROGRESS: seconds to wait before sending again.",
        ),
    ]


RETRY_AFTER_SCHEMA = {"type": "integer", "minimum": 0}


def declare_retry_after(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every 429 and 503 answer of the API carries
    ``Retry-After`` (a rate limit's window, a dependency's wait), so the schema says so on
    each, however its view declared it."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if status in ("429", "503"):
                    response.setdefault("headers", {}).setdefault(
                        "Retry-After",
                        {
                            "schema": RETRY_AFTER_SCHEMA,
                            "description": "Seconds to wait before sending again.",
                        },
                    )
    return result
