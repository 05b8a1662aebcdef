"""The write rate limit (:mod:`idempotency.core.ratelimit`) as a DRF throttle."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from idempotency.core.conf import caller_scope, engine_hook
from idempotency.core.ratelimit import RateDecision, check_write_rate
from idempotency.metrics import count_rate_limited


def answers(view: Any, method: str) -> bool:
    """Whether ``view`` has something to answer ``method`` with beyond a 405: a handler (HEAD
    is the GET handler, where there is one), and for OPTIONS a metadata class.

    DRF runs the throttles in ``initial()``, before it looks for the handler, so a throttle
    that counted every request it saw charged a method the route does not answer: an app's
    stray ``DELETE`` (or a fuzzer's) spent the caller's writes and, once they ran out, was
    answered 429 instead of 405. A throttle counts only what the view answers."""
    if method == "OPTIONS":
        return getattr(view, "metadata_class", None) is not None
    return hasattr(view, method.lower())


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
    the counter's PTTL; a method the view does not answer (a 405) is not counted
    (:func:`answers`). The ``RATE_LIMIT_CEILING_SHARE`` hook, if set, says what share of the
    tenant's ceiling this request may fill (None: all of it).
    """

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method in SAFE_METHODS or not answers(view, request.method):
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
        count_rate_limited(tenant=tenant, limit=refusing_limit(decision, share=share))
        raise RateLimited(decision)


def refusing_limit(decision: RateDecision, *, share: float | None) -> str:
    """The ``limit`` label of a refusal: ``principal``, ``ceiling``, or ``ceiling_share``
    when the tenant's counter refused a caller held to a share of the ceiling (a guest)."""
    if decision.scope != "tenant":
        return "principal"
    return "ceiling_share" if share is not None and share < 1 else "ceiling"
