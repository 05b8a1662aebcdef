"""Write rate limit per tenant + principal under a tenant-wide ceiling (seed 2.1): fixed
windows counted by one Lua call.

Idempotency absorbs duplicates but every request still costs a claim, a lookup or a replay; a
runaway client retry loop (or a scripted abuse of one diner's identity) should be stopped
before it reaches the engine. ``ratelimit.lua`` does ``INCR`` and, for a new counter only,
``PEXPIRE`` atomically on the tenant's Redis node, so N concurrent requests against a limit of L
let exactly L through, whatever the number of app processes.

What the caller can rely on:

- **Scope**: one counter per tenant · principal (the ``SCOPE_RESOLVER``'s pair: for the API,
  one diner or one secret server key) across all endpoints carrying :class:`TenantRateThrottle`,
  and one counter per tenant that every principal's allowed writes add to.
- **Limit**: the tenant's own rate (``RATE_LIMIT_FOR_TENANT``, here
  ``Tenant.write_rate_per_minute``) or ``RATE_LIMIT_PER_MINUTE`` (600), scaled to windows of
  ``RATE_LIMIT_WINDOW_SECONDS`` (60).
- **Ceiling**: the tenant's own (``RATE_LIMIT_CEILING_FOR_TENANT``) or
  ``RATE_LIMIT_TENANT_CEILING_PER_MINUTE``: the sum of all principals' writes, so that new
  principals (fresh sessions, other diners) never multiply a tenant's budget. Counted in the
  same Lua call as the principal (``ratelimit_ceiling.lua``: both keys share the tenant's hash
  tag), so it costs no extra round trip; a request its principal's limit refuses is not
  counted against the tenant, nor is one the ceiling refuses (so refusals never keep the
  tenant counter above its ceiling). A tenant split into N sub-buckets gets
  ``ceil(ceiling / N)`` per bucket (a principal's counter and its bucket's tenant counter
  must share a slot), so its total stays within ``ceiling + N - 1``.
  The window starts with the principal's first request, on Redis's clock (no app-server clock
  is involved), and ``Retry-After`` is the window's remaining time.
- **Share of the ceiling**: the ``RATE_LIMIT_CEILING_SHARE`` hook (request -> share) may let
  a request fill only a share of the ceiling: it is refused once the tenant's counter reaches
  ``ceil(ceiling * share)`` (at least 1; per bucket for a split tenant), while a request of
  share 1.0 still passes up to the full ceiling on the same counter. Callers anyone can
  become (guests) then cannot take the whole ceiling from the tenant's own writes.
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
from idempotency.core.hashing import principal_digest
from idempotency.stores.nodes import node_cannot_serve, run_on_node

__all__ = [
    "RateDecision",
    "ceiling_key",
    "ceiling_share",
    "check_rate",
    "check_write_rate",
    "hit",
    "hit_with_ceiling",
    "limit_per_window",
    "rate_key",
    "reset_rate_cache",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RateDecision:
    """One request counted: allowed or not, and when the window ends. ``scope`` names the
    counter that decided: ``"principal"``, or ``"tenant"`` when the tenant's ceiling refused."""

    allowed: bool
    limit: int
    count: int
    reset_ms: int
    scope: str = "principal"

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds until the window resets, rounded up (never "retry now")."""
        return max(1, math.ceil(self.reset_ms / 1000))


@cache
def _script(name: str = "ratelimit") -> Script:
    source = resources.files("idempotency.scripts").joinpath("lua", f"{name}.lua").read_bytes()
    # Registered without a client (bytes need no client's encoder): each call names its
    # node's client; redis-py runs EVALSHA and loads the script again after NOSCRIPT.
    return Script(None, source)  # type: ignore[arg-type]


def rate_key(*, tenant: str, principal: str, window_seconds: int, buckets: int = 1) -> str:
    """``rl:{t:<tenant>}:<principal hash>:<window>s``; with sub-buckets the principal
    picks one, so a hot tenant's counters spread like its idempotency keys. The window
    length is part of the name so changing it never mixes old and new counts.

    The principal (a client address, a diner id) is named by its keyed hash
    (:func:`~idempotency.core.hashing.principal_digest`): a plain SHA-256 let whoever reads
    the key names find an IPv4 address or a guessable diner id again by hashing candidates.
    A key rotation starts new counters (for one window a caller's count restarts)."""
    digest = principal_digest(principal)
    tag = f"t:{tenant}"
    if buckets > 1:
        tag += f":{int(digest[:8], 16) % buckets}"
    return f"rl:{{{tag}}}:{digest[:16]}:{window_seconds}s"


def ceiling_key(principal_key: str) -> str:
    """The tenant-wide counter beside a principal's counter, under the same hash tag (and so
    the same sub-bucket): ``rl:{t:<tenant>}:tenant:<window>s``."""
    prefix, _, rest = principal_key.rpartition("}:")
    return f"{prefix}}}:tenant:{rest.rpartition(':')[2]}"


def hit(client: Any, *, key: str, limit: int, window_ms: int) -> RateDecision:
    """Count one request on ``key`` (one round trip) and decide against ``limit``."""
    if limit < 1 or window_ms < 1:
        raise ValueError("limit and window_ms must be positive")
    count, remaining = _script()(keys=[key], args=[window_ms], client=client)
    return RateDecision(
        allowed=int(count) <= limit, limit=limit, count=int(count), reset_ms=int(remaining)
    )


def hit_with_ceiling(
    client: Any,
    *,
    key: str,
    limit: int,
    ceiling: int,
    window_ms: int,
    ceiling_counter: str | None = None,
) -> RateDecision:
    """Count one request on ``key`` and, if its ``limit`` allows it, on the ceiling counter
    (by default the tenant-wide one beside ``key``; it must share ``key``'s hash tag): one
    round trip, both decided atomically."""
    if min(limit, ceiling, window_ms) < 1:
        raise ValueError("limit, ceiling and window_ms must be positive")
    refused_by, count, remaining = _script("ratelimit_ceiling")(
        keys=[key, ceiling_counter or ceiling_key(key)],
        args=[window_ms, limit, ceiling],
        client=client,
    )
    refused_by = int(refused_by)
    return RateDecision(
        allowed=refused_by == 0,
        limit=ceiling if refused_by == 2 else limit,
        count=int(count),
        reset_ms=int(remaining),
        scope="tenant" if refused_by == 2 else "principal",
    )


def ceiling_share(ceiling: int, share: float) -> int:
    """The part of a window's ``ceiling`` that a request with ``share`` may fill: rounded up,
    at least 1 (a share of 0.8 of 3,000 is 2,400; of 1 it is 1)."""
    # rounded first so that float noise (20 * 0.7 = 14.000000000000002) does not add one
    return max(1, math.ceil(round(ceiling * share, 9)))


def limit_per_window(per_minute: int, window_seconds: int) -> int:
    """The per-minute rate scaled to one window, at least 1 (a 1 s window of 600/min is 10)."""
    return max(1, math.ceil(per_minute * window_seconds / 60))


_rates: dict[tuple[str, str], tuple[float, int | None]] = {}
_rates_lock = threading.Lock()


def _per_minute(tenant: str, *, hook: str, default_setting: str) -> int | None:
    """A tenant's rate (its own, else the default); None: not limited. Looked up through the
    ``hook`` at most once per ``RATE_LIMIT_CACHE_SECONDS`` per process, so the limiter adds
    no database query to a normal request."""
    default = engine_setting(default_setting) or None
    lookup = engine_hook(hook)
    if lookup is None:
        return default
    now = time.monotonic()
    cached = _rates.get((hook, tenant))
    if cached is not None and cached[0] > now:
        own = cached[1]
    else:
        own = lookup(tenant)
        with _rates_lock:
            _rates[(hook, tenant)] = (now + engine_setting("RATE_LIMIT_CACHE_SECONDS"), own)
    return own or default


def reset_rate_cache() -> None:
    """Forget looked-up tenant rates (tests, or after changing a tenant's rate)."""
    with _rates_lock:
        _rates.clear()


def check_write_rate(*, tenant: str, principal: str, share: float = 1.0) -> RateDecision | None:
    """Count one write of ``principal`` in ``tenant``; ``share`` (0 < share <= 1) is the part
    of the tenant's ceiling this write may fill. None means "not limited": no rate configured,
    the engine switched off (``ENABLED``), or Redis unusable (fail open, see the module
    docstring)."""
    if not 0 < share <= 1:
        raise ValueError(f"a share of the ceiling must be more than 0 and at most 1, not {share}")
    if not engine_setting("ENABLED"):
        return None
    per_minute = _per_minute(
        tenant, hook="RATE_LIMIT_FOR_TENANT", default_setting="RATE_LIMIT_PER_MINUTE"
    )
    ceiling_per_minute = _per_minute(
        tenant,
        hook="RATE_LIMIT_CEILING_FOR_TENANT",
        default_setting="RATE_LIMIT_TENANT_CEILING_PER_MINUTE",
    )
    if per_minute is None and ceiling_per_minute is None:
        return None
    window = int(engine_setting("RATE_LIMIT_WINDOW_SECONDS"))
    buckets = engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1)
    key = rate_key(tenant=tenant, principal=principal, window_seconds=window, buckets=buckets)
    # No per-principal rate: only the ceiling limits (a limit that can never be reached).
    limit = limit_per_window(per_minute, window) if per_minute else 2**62
    ceiling = (
        ceiling_share(math.ceil(limit_per_window(ceiling_per_minute, window) / buckets), share)
        if ceiling_per_minute
        else None
    )

    def count(client: Any) -> RateDecision:
        if ceiling is None:
            return hit(client, key=key, limit=limit, window_ms=window * 1000)
        return hit_with_ceiling(
            client, key=key, limit=limit, ceiling=ceiling, window_ms=window * 1000
        )

    return _fail_open(tenant, count)


def check_rate(
    *, tenant: str, counter: str, per_minute: int, outer: tuple[str, int] | None = None
) -> RateDecision | None:
    """Count one request against an ad-hoc limit of ``per_minute`` named ``counter`` within
    ``tenant`` (e.g. sessions opened per client address) and, when that allows it, against
    ``outer`` = (counter, per_minute) (e.g. per API key), in one round trip. Same windows, node
    and fail-open rule as :func:`check_write_rate`; None means "not limited". A refusal by
    ``outer`` has ``scope == "tenant"``."""
    if not engine_setting("ENABLED"):
        return None
    window = int(engine_setting("RATE_LIMIT_WINDOW_SECONDS"))
    key = rate_key(tenant=tenant, principal=counter, window_seconds=window)
    limit = limit_per_window(per_minute, window)

    def count(client: Any) -> RateDecision:
        if outer is None:
            return hit(client, key=key, limit=limit, window_ms=window * 1000)
        return hit_with_ceiling(
            client,
            key=key,
            limit=limit,
            ceiling=limit_per_window(outer[1], window),
            ceiling_counter=rate_key(tenant=tenant, principal=outer[0], window_seconds=window),
            window_ms=window * 1000,
        )

    return _fail_open(tenant, count)


def _fail_open(tenant: str, count: Any) -> RateDecision | None:
    try:
        return run_on_node(tenant, count, op="ratelimit")
    except RedisError as exc:
        logger.warning(
            "rate limiter: Redis failed (%s); letting the request through",
            exc,
            exc_info=not node_cannot_serve(exc),
        )
        return None
