"""Machine-readable error codes of the ordering API, with their HTTP status.

The API docs, the views and the tests all read this one table.
"""

from enum import StrEnum


class OrderingErrorCode(StrEnum):
    ORDER_NOT_FOUND = "ORDER_NOT_FOUND"
    ORDER_STATUS_CONFLICT = "ORDER_STATUS_CONFLICT"
    INVALID_TRANSITION_TARGET = "INVALID_TRANSITION_TARGET"
    DISH_NOT_FOUND = "DISH_NOT_FOUND"
    DISH_UNAVAILABLE = "DISH_UNAVAILABLE"
    INSUFFICIENT_STOCK = "INSUFFICIENT_STOCK"
    QUANTITY_INVALID = "QUANTITY_INVALID"
    COUPON_INVALID = "COUPON_INVALID"
    COUPON_EXHAUSTED = "COUPON_EXHAUSTED"
    ORDER_ID_UNAVAILABLE = "ORDER_ID_UNAVAILABLE"
    ORDER_ALREADY_PLACED = "ORDER_ALREADY_PLACED"


HTTP_STATUS: dict[OrderingErrorCode, int] = {
    OrderingErrorCode.ORDER_NOT_FOUND: 404,
    OrderingErrorCode.ORDER_STATUS_CONFLICT: 409,
    OrderingErrorCode.INVALID_TRANSITION_TARGET: 400,
    OrderingErrorCode.DISH_NOT_FOUND: 422,
    OrderingErrorCode.DISH_UNAVAILABLE: 422,
    OrderingErrorCode.INSUFFICIENT_STOCK: 409,
    OrderingErrorCode.QUANTITY_INVALID: 400,
    OrderingErrorCode.COUPON_INVALID: 422,
    OrderingErrorCode.COUPON_EXHAUSTED: 422,
    OrderingErrorCode.ORDER_ID_UNAVAILABLE: 503,
    OrderingErrorCode.ORDER_ALREADY_PLACED: 409,
}
