"""Where a new operation's ``Idempotency-Key`` comes from: a UUID v4 (the default), or one of
the server's pre-issued tokens, fetched in batches.

A key is made once per *operation* and then kept (see :mod:`ordering_client.storage`); these
sources are asked only when an operation starts.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ordering_client.errors import OrderingError


@dataclass(frozen=True)
class IssuedTokens:
    """A batch from ``POST /api/v1/idempotency-tokens/``; tokens are bound to ``diner_id``."""

    tokens: list[str]
    expires_at: float  # epoch seconds, on this device's clock (client.on_this_clock)
    diner_id: str


# Asks the server for ``count`` tokens (the client passes its own method).
TokenIssuer = Callable[[int], IssuedTokens]


class KeySource(Protocol):
    def next_key(self, issue: TokenIssuer, diner_id: str) -> str: ...


class UuidKeys:
    """A fresh random UUID v4 per operation: no round trip, works in every server mode."""

    def next_key(self, issue: TokenIssuer, diner_id: str) -> str:
        return str(uuid.uuid4())


class TokenKeys:
    """Pre-issued tokens, ``batch_size`` per request, one per operation.

    A token is bound to the diner it was issued to, so the batch is dropped when the session's
    diner changes, and a token is not handed out within ``expiry_margin`` seconds of its
    expiry, or within half the batch's life where tokens live less than twice that (a
    deployment's ``IDEMPOTENCY_TOKEN_TTL_SECONDS`` of an hour or less would otherwise leave no
    token usable, and a batch would be asked for, and wasted, for every operation). When
    tokens cannot be had (the server answers 503 while its Redis is down, or any other
    failure), the operation gets a UUID v4 instead: a token is a convenience, never a reason
    for an order to fail. A token the server refuses as unknown or invalid before
    anything ran (a Redis that came back without its data no longer knows the batch) makes
    the client drop the batch (:meth:`discard_batch`) and send the operation once more with
    a new key.
    """

    def __init__(self, batch_size: int = 20, *, expiry_margin: float = 3600.0) -> None:
        if not 1 <= batch_size <= 1000:
            raise ValueError("batch_size must be 1-1000")
        self.batch_size = batch_size
        self.expiry_margin = expiry_margin
        self._tokens: deque[str] = deque()
        self._expires_at = 0.0
        self._margin = expiry_margin  # this batch's: at most half its life
        self._diner_id: str | None = None
        self._lock = threading.Lock()

    def next_key(self, issue: TokenIssuer, diner_id: str) -> str:
        with self._lock:
            usable = self._diner_id == diner_id and time.time() < self._expires_at - self._margin
            if not usable or not self._tokens:
                try:
                    batch = issue(self.batch_size)
                except OrderingError:  # no tokens now: fall back, see the docstring
                    return str(uuid.uuid4())
                self._tokens = deque(batch.tokens)
                self._expires_at = batch.expires_at
                self._margin = min(self.expiry_margin, (batch.expires_at - time.time()) / 2)
                self._diner_id = batch.diner_id
            return self._tokens.popleft()

    def discard_batch(self) -> None:
        """Forget the tokens held: the server refused one as unknown (its Redis lost them)
        or invalid, so the next operation asks for a new batch."""
        with self._lock:
            self._tokens.clear()
            self._expires_at = 0.0
