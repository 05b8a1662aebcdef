"""The one exception type ordering services raise for refusals the client can act on."""

from __future__ import annotations

from typing import Any

from config.api_errors import ApiError
from ordering.error_codes import HTTP_STATUS, OrderingErrorCode


class OrderingError(ApiError):
    def __init__(self, code: OrderingErrorCode, detail: str, **extra: Any) -> None:
        super().__init__(status_code=HTTP_STATUS[code], code=code, detail=detail, **extra)
