"""Server-side SVG bar geometry for the hit-rate chart (no JavaScript, nothing external).

Each hour is a stacked bar: first executions at the bottom, replayed duplicates on top, the
hour's hit rate written above it; hours are labelled in the current (the tenant's) time zone.
Geometry is computed here so the template only draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone

from idempotency.reports import HourlyHits

WIDTH = 720
HEIGHT = 220
PLOT_TOP = 22
PLOT_BOTTOM = 190
LEFT = 36
GAP = 4


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    center: float
    first_y: float
    first_height: float
    hit_y: float
    hit_height: float
    label: str
    show_label: bool
    rate_text: str
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    plot_top: int
    plot_bottom: int
    max_total: int
    bars: list[Bar]


def hit_rate_chart(hours: Sequence[HourlyHits]) -> Chart:
    """Bars scaled to the busiest hour (at least 1, so an idle day draws an empty axis)."""
    max_total = max([h.total for h in hours] + [1])
    slot = (WIDTH - LEFT) / max(len(hours), 1)
    scale = (PLOT_BOTTOM - PLOT_TOP) / max_total
    bars = []
    for i, h in enumerate(hours):
        first_height = h.first_executions * scale
        hit_height = h.hits * scale
        first_y = PLOT_BOTTOM - first_height
        rate = h.hit_rate
        label = timezone.localtime(h.hour).strftime("%H:%M")  # the tenant's zone
        bars.append(
            Bar(
                x=round(LEFT + i * slot + GAP / 2, 2),
                width=round(slot - GAP, 2),
                center=round(LEFT + i * slot + slot / 2, 2),
                first_y=round(first_y, 2),
                first_height=round(first_height, 2),
                hit_y=round(first_y - hit_height, 2),
                hit_height=round(hit_height, 2),
                label=label,
                show_label=i % 3 == 0 or i == len(hours) - 1,
                rate_text="" if rate is None else f"{rate:.0%}",
                title=(
                    f"{label}: {h.hits} repeats, {h.first_executions} carried out"
                    + ("" if rate is None else f", {rate:.0%} repeats")
                ),
            )
        )
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        plot_top=PLOT_TOP,
        plot_bottom=PLOT_BOTTOM,
        max_total=max_total,
        bars=bars,
    )
