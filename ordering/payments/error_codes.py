"""Error codes of the payment webhook, with their HTTP status (the API docs and tests read this).

Every refusal here happens before anything is written.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from config.api_errors import ApiError


class PaymentErrorCode(StrEnum):
    PAYMENT_PROVIDER_UNKNOWN = "PAYMENT_PROVIDER_UNKNOWN"
    PAYMENT_SIGNATURE_INVALID = "PAYMENT_SIGNATURE_INVALID"
    PAYMENT_TIMESTAMP_INVALID = "PAYMENT_TIMESTAMP_INVALID"
    PAYMENT_TIMESTAMP_STALE = "PAYMENT_TIMESTAMP_STALE"
    PAYMENT_CALLBACK_INVALID = "PAYMENT_CALLBACK_INVALID"
    PAYMENT_NOT_FOUND = "PAYMENT_NOT_FOUND"


HTTP_STATUS: dict[PaymentErrorCode, int] = {
    PaymentErrorCode.PAYMENT_PROVIDER_UNKNOWN: 400,
    # Missing or wrong signature: the sender is not who it claims to be.
    PaymentErrorCode.PAYMENT_SIGNATURE_INVALID: 401,
    PaymentErrorCode.PAYMENT_TIMESTAMP_INVALID: 400,
    # Correctly signed but older (or newer) than the tolerance: a replayed capture.
    PaymentErrorCode.PAYMENT_TIMESTAMP_STALE: 400,
    PaymentErrorCode.PAYMENT_CALLBACK_INVALID: 400,
    # Authentic, but names no payment we started (yet): the provider retries later.
    PaymentErrorCode.PAYMENT_NOT_FOUND: 404,
}


class CallbackRejected(ApiError):
    """A callback refused before anything was written."""

    def __init__(self, code: PaymentErrorCode, detail: str, **extra: Any) -> None:
        super().__init__(status_code=HTTP_STATUS[code], code=code, detail=detail, **extra)
