"""The retired rows a dashboard list shows: the newest few, never all.

A coupon deactivated or an API key revoked is kept (orders name the coupon, records the key)
and no longer counts toward the restaurant's bound of live ones, so a restaurant retires them
without end: listed whole, the coupons and API keys pages grew with every campaign and every
key rotation ever made. They list every live row and the ``RETIRED_SHOWN`` newest retired
ones, and say when older ones are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db.models import Model, QuerySet

RETIRED_SHOWN = 50

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Listed(Generic[M]):
    rows: list[M]
    older_retired_left_out: bool


def live_and_newest_retired(live: QuerySet[M], retired_newest_first: QuerySet[M]) -> Listed[M]:
    """Every row of ``live``, then at most ``RETIRED_SHOWN`` of ``retired_newest_first``
    (read one past it, to know whether any is left out)."""
    retired = list(retired_newest_first[: RETIRED_SHOWN + 1])
    return Listed(
        rows=[*live, *retired[:RETIRED_SHOWN]], older_retired_left_out=len(retired) > RETIRED_SHOWN
    )
