"""The write rate limit (:mod:`idempotency.core.ratelimit`) as a DRF throttle."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from idempotency.core.conf import caller_scope, engine_hook
from idempotency.core.ratelimit import RateDecision, check_write_rate


class RateLimited(exceptions.Throttled):
    """429 ``RATE_LIMITED``; ``wait`` is the window's remaining time rounded up to whole
    seconds, the number the detail names: DRF's own exception handler writes ``Retry-After``
    as ``%d`` of it, which of the exact time (58.7 s) told a client to come back while the
    window still ran (58), and refused it again."""

    def __init__(self, decision: RateDecision) -> None:
        whose = "this tenant's ceiling" if decision.scope == "tenant" else "the limit"
        super().__init__(
            detail=(
                f"Too many writes: {whose} is {decision.limit} per window; "
                f"retry in {decision.retry_after_seconds} s."
            )
        )
        self.wait = decision.retry_after_seconds


class TenantRateThrottle(BaseThrottle):
    """DRF throttle for write endpoints: unsafe methods count against the caller's limit.

    Runs in DRF's ``initial()``, after authentication and permissions (a refused or
    unauthenticated request costs nothing) and before the handler and so before the
    idempotency engine. Raises :class:`RateLimited` itself so that ``Retry-After`` comes from
    the counter's PTTL. The ``RATE_LIMIT_CEILING_SHARE`` hook, if set, says what share of the
    tenant's ceiling this request may fill (None: all of it).
    """

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        identity = caller_scope(request)
        if identity is None:
            return True
        tenant, principal = identity
        share_of = engine_hook("RATE_LIMIT_CEILING_SHARE")
        share = share_of(request) if share_of is not None else None
        decision = check_write_rate(
            tenant=tenant, principal=principal, share=1.0 if share is None else share
        )
        if decision is None or decision.allowed:
            return True
        raise RateLimited(decision)
