"""When to retry and how long to wait: exponential backoff with full jitter, ``Retry-After``
as a floor, bounded by attempts and by total time.

Full jitter (a uniformly random delay between 0 and the exponential cap) spreads the retries of
many clients that failed together, so they do not come back in one wave; ``Retry-After`` is the
server saying when trying again is worth it, so the client never comes back sooner.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

IN_PROGRESS = "IDEMPOTENCY_REQUEST_IN_PROGRESS"


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try; ``max_elapsed`` (seconds) bounds the whole call:
    a wait that would end after it is not started."""

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_elapsed: float = 60.0

    def backoff(self, retry: int, rng: Callable[[], float] = random.random) -> float:
        """Full-jitter delay before retry number ``retry`` (1 for the first retry). The
        doubling stops at ``2 ** 1023``, the largest power of two a float holds: past it a
        policy bounded by time rather than attempts raised ``OverflowError`` out of the retry
        loop at retry 1025, and every cap is ``max_delay`` long before it anyway."""
        cap = min(self.max_delay, self.base_delay * 2 ** min(retry - 1, 1023))
        return rng() * cap

    def delay(
        self, retry: int, retry_after: float | None, rng: Callable[[], float] = random.random
    ) -> float:
        """The wait before retry ``retry``: the jittered backoff, never less than
        ``retry_after``."""
        return max(retry_after or 0.0, self.backoff(retry, rng))


@dataclass(frozen=True)
class RetryEvent:
    """Passed to ``on_retry`` before each wait: what failed and how long the client waits."""

    attempt: int  # the attempt that failed (1 for the first)
    delay: float  # seconds the client now waits
    status: int | None  # None for a network error
    code: str | None
    retry_after: float | None
    error: Exception | None


def is_retryable_status(status: int, code: str | None) -> bool:
    """408, 409 in progress, 429 and every 5xx; nothing else (another 4xx is a final answer,
    stored under the key, that a retry would only replay). A 408 is a proxy's that tired of
    waiting for the request: the server never had it, and the same key keeps a retry safe."""
    return status >= 500 or status in (408, 429) or (status == 409 and code == IN_PROGRESS)


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP date (any of RFC 9110's three formats); None if absent or unreadable."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, OverflowError):
        # OverflowError: a year of twenty digits (a proxy's garbage) fits no clock; as
        # unreadable as any other, not an error out of the caller's retry loop
        return None
    if when.tzinfo is None:
        # asctime dates carry no zone (and "-0000" says none is known): RFC 9110 has every
        # HTTP date in GMT, and a recipient must read all three of its formats
        when = when.replace(tzinfo=UTC)
    return when


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent
    or unreadable. A date is counted from ``now``: pass the answer's ``Date``
    (:func:`retry_after_of`)."""
    if not value:
        return None
    value = value.strip()
    # delta-seconds are ASCII digits (RFC 9110); str.isdigit also takes "²" (a byte 0xB2 read
    # as Latin-1), which float() refuses, and other scripts' digits
    if value.isascii() and value.isdigit():
        return float(value)
    when = parse_http_date(value)
    if when is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    """Seconds an answer's ``Retry-After`` asks to wait. A date in it is on the server's clock
    (or a proxy's), so it is counted from the answer's ``Date``, not from this device's clock:
    a device an hour behind read "in a second" as an hour and gave up at once (a wait past
    ``max_elapsed`` is not started), and one ahead did not wait at all. Only an answer without
    a readable ``Date`` is counted on this device's clock."""
    return parse_retry_after(headers.get("retry-after"), now=parse_http_date(headers.get("date")))
