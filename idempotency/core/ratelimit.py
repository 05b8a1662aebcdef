"""Write rate limit per tenant + principal (seed 2.1): a fixed window counted by one Lua call.

Idempotency absorbs duplicates but every request still costs a claim, a lookup or a replay; a
runaway client retry loop (or a scripted abuse of one diner's identity) should be stopped
before it reaches the engine. ``ratelimit.lua`` does ``INCR`` and, for a new counter only,
``PEXPIRE`` atomically on the tenant's Redis node, so N concurrent requests against a limit of L
let exactly L through, whatever the number of app processes.

What the caller can rely on:

- **Scope**: one counter per tenant · principal (the ``SCOPE_RESOLVER``'s pair: for the API,
  one API client and one diner) across all endpoints carrying :class:`TenantRateThrottle`.
- **Limit**: the tenant's own rate (``RATE_LIMIT_FOR_TENANT``, here
  ``Tenant.write_rate_per_minute``) or ``RATE_LIMIT_PER_MINUTE`` (600), scaled to windows of
  ``RATE_LIMIT_WINDOW_SECONDS`` (60).
  The window starts with the principal's first request, on Redis's clock (no app-server clock
  is involved), and ``Retry-After`` is the window's remaining time.
- **Every request counts**, replays included: the throttle runs before the engine, so a
  client hammering one key is limited like any other (it protects the server, and a replay
  is not free).
- **Fails open**: no Redis configured, the node's breaker not closed, or a Redis error → the
  request is allowed. The limiter protects capacity, not correctness; refusing writes because
  the limiter's store is sick would turn a Redis incident into an outage, and exactly-once
  never depends on it.

Keys carry the tenant's hash tag, ``rl:{t:<tenant>}:<principal hash>:<window>s``, so a
tenant's counters sit on its node (and slot) with its idempotency keys, and a tenant split into
sub-buckets (``HOT_TENANT_BUCKETS``) spreads its principals over them. They are kept out of
``idem:`` so that what lives there is exactly the idempotency state (claims, results, tokens).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from redis.commands.core import Script
from redis.exceptions import RedisError

from idempotency.core.conf import engine_hook, engine_setting
from idempotency.stores.nodes import run_on_node

__all__ = [
    "RateDecision",
    "check_write_rate",
    "hit",
    "limit_per_window",
    "rate_key",
    "reset_rate_cache",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RateDecision:
    """One request counted: allowed or not, and when the window ends."""

    allowed: bool
    limit: int
    count: int
    reset_ms: int

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds until the window resets, rounded up (never "retry now")."""
        return max(1, math.ceil(self.reset_ms / 1000))


@cache
def _script() -> Script:
    source = resources.files("idempotency.scripts").joinpath("lua", "ratelimit.lua").read_bytes()
    # Registered without a client (bytes need no client's encoder): each call names its
    # node's client; redis-py runs EVALSHA and loads the script again after NOSCRIPT.
    return Script(None, source)  # type: ignore[arg-type]


def rate_key(*, tenant: str, principal: str, window_seconds: int, buckets: int = 1) -> str:
    """``rl:{t:<tenant>}:<principal hash>:<window>s``; with sub-buckets the principal
    picks one, so a hot tenant's counters spread like its idempotency keys. The window
    length is part of the name so changing it never mixes old and new counts."""
    digest = hashlib.sha256(principal.encode()).hexdigest()
    tag = f"t:{tenant}"
    if buckets > 1:
        tag += f":{int(digest[:8], 16) % buckets}"
    return f"rl:{{{tag}}}:{digest[:16]}:{window_seconds}s"


def hit(client: Any, *, key: str, limit: int, window_ms: int) -> RateDecision:
    """Count one request on ``key`` (one round trip) and decide against ``limit``."""
    if limit < 1 or window_ms < 1:
        raise ValueError("limit and window_ms must be positive")
    count, remaining = _script()(keys=[key], args=[window_ms], client=client)
    return RateDecision(
        allowed=int(count) <= limit, limit=limit, count=int(count), reset_ms=int(remaining)
    )


def limit_per_window(per_minute: int, window_seconds: int) -> int:
    """The per-minute rate scaled to one window, at least 1 (a 1 s window of 600/min is 10)."""
    return max(1, math.ceil(per_minute * window_seconds / 60))


_rates: dict[str, tuple[float, int | None]] = {}
_rates_lock = threading.Lock()


def _rate_per_minute(tenant: str) -> int | None:
    """The tenant's rate (its own, else the default); None: not limited. Looked up through
    ``RATE_LIMIT_FOR_TENANT`` at most once per ``RATE_LIMIT_CACHE_SECONDS`` per process,
    so the limiter adds no database query to a normal request."""
    default = engine_setting("RATE_LIMIT_PER_MINUTE") or None
    lookup = engine_hook("RATE_LIMIT_FOR_TENANT")
    if lookup is None:
        return default
    now = time.monotonic()
    cached = _rates.get(tenant)
    if cached is not None and cached[0] > now:
        own = cached[1]
    else:
        own = lookup(tenant)
        with _rates_lock:
            _rates[tenant] = (now + engine_setting("RATE_LIMIT_CACHE_SECONDS"), own)
    return own or default


def reset_rate_cache() -> None:
    """Forget looked-up tenant rates (tests, or after changing a tenant's rate)."""
    with _rates_lock:
        _rates.clear()


def check_write_rate(*, tenant: str, principal: str) -> RateDecision | None:
    """Count one write of ``principal`` in ``tenant``. None means "not limited": no rate
    configured, the engine switched off (``ENABLED``), or Redis unusable (fail open, see the
    module docstring)."""
    if not engine_setting("ENABLED"):
        return None
    per_minute = _rate_per_minute(tenant)
    if per_minute is None:
        return None
    window = int(engine_setting("RATE_LIMIT_WINDOW_SECONDS"))
    key = rate_key(
        tenant=tenant,
        principal=principal,
        window_seconds=window,
        buckets=engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1),
    )
    limit = limit_per_window(per_minute, window)
    try:
        return run_on_node(
            tenant,
            lambda client: hit(client, key=key, limit=limit, window_ms=window * 1000),
            op="ratelimit",
        )
    except RedisError:
        logger.warning("rate limiter: Redis failed; letting the request through", exc_info=True)
        return None
