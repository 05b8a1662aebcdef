"""A client of the ordering API that never orders twice: it opens a diner session, gives each
operation one ``Idempotency-Key`` kept across retries and restarts, and retries with
exponential backoff and full jitter, honouring ``Retry-After``. See README.md."""

from ordering_client.client import ApiResult, OrderingClient, OrderItem, PlaceOrder, Session
from ordering_client.errors import (
    ApiError,
    IdempotencyKeyReusedError,
    NetworkError,
    OrderAlreadyPlacedError,
    OrderingError,
    RetriesExhaustedError,
    SessionChangedError,
)
from ordering_client.keys import IssuedTokens, KeySource, TokenKeys, UuidKeys
from ordering_client.retry import RetryEvent, RetryPolicy
from ordering_client.storage import JsonFileStorage, MemoryStorage, Storage

__all__ = [
    "ApiError",
    "ApiResult",
    "IdempotencyKeyReusedError",
    "IssuedTokens",
    "JsonFileStorage",
    "KeySource",
    "MemoryStorage",
    "NetworkError",
    "OrderAlreadyPlacedError",
    "OrderItem",
    "OrderingClient",
    "OrderingError",
    "PlaceOrder",
    "RetriesExhaustedError",
    "RetryEvent",
    "RetryPolicy",
    "Session",
    "SessionChangedError",
    "Storage",
    "TokenKeys",
    "UuidKeys",
]
