"""The hourly hit-rate selector and the SVG bar geometry drawn from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from idempotency.audit import AuditEvent, save_events
from idempotency.reports import HourlyHits, hourly_hits, outcome_totals
from ordering.dashboard.charts import PLOT_BOTTOM, PLOT_TOP, hit_rate_chart

NOW = datetime(2030, 5, 17, 14, 25, tzinfo=UTC)


def event(tenant_key: str, at: datetime, outcome: str, key: str = "k") -> AuditEvent:
    return AuditEvent(
        tenant_key=tenant_key,
        endpoint="POST x",
        key=key,
        outcome=outcome,
        source="redis",
        principal="p",
        at=at,
    )


def hit(tenant_key: str, at: datetime, outcome: str = "HIT") -> None:
    save_events([event(tenant_key, at, outcome)])


def first(tenant_key: str, at: datetime, key: str) -> None:
    save_events([event(tenant_key, at, "MISS", key)])


@pytest.mark.django_db
def test_hourly_hits_fill_gaps_and_keep_to_the_window_and_tenant():
    hit("7", NOW)  # the current hour
    hit("7", NOW.replace(minute=0))  # the first instant of the current hour
    hit("7", NOW - timedelta(hours=3))
    hit("7", NOW - timedelta(hours=3), outcome="REUSED")  # not a hit
    hit("7", NOW - timedelta(hours=25))  # outside the window
    hit("8", NOW)  # another tenant
    first("7", NOW - timedelta(hours=3), "a")
    first("7", NOW - timedelta(hours=3), "b")
    first("7", NOW - timedelta(hours=3), "c")

    hours = hourly_hits(tenant_key="7", hours=24, now=NOW)

    assert len(hours) == 24
    assert hours[-1] == HourlyHits(hour=NOW.replace(minute=0), hits=2, first_executions=0)
    assert hours[-4] == HourlyHits(
        hour=NOW.replace(minute=0) - timedelta(hours=3), hits=1, first_executions=3
    )
    assert hours[-4].hit_rate == 0.25 and hours[-1].hit_rate == 1.0
    assert sum(h.total for h in hours) == 6
    assert all(h.hit_rate is None for h in hours[:-4])
    totals = outcome_totals(tenant_key="7", since=NOW - timedelta(hours=24))
    assert totals == {"MISS": 3, "HIT": 3, "IN_PROGRESS": 0, "REUSED": 1, "CONFLICT": 0}


def test_chart_scales_bars_to_the_busiest_hour():
    base = datetime(2030, 1, 1, tzinfo=UTC)
    chart = hit_rate_chart(
        [
            HourlyHits(hour=base, hits=0, first_executions=0),
            HourlyHits(hour=base + timedelta(hours=1), hits=1, first_executions=3),
            HourlyHits(hour=base + timedelta(hours=2), hits=2, first_executions=0),
        ]
    )
    idle, busy, replays = chart.bars
    assert chart.max_total == 4
    assert (idle.first_height, idle.hit_height, idle.rate_text) == (0, 0, "")
    assert busy.first_height + busy.hit_height == PLOT_BOTTOM - PLOT_TOP  # the full height
    assert busy.hit_y == PLOT_TOP and busy.rate_text == "25%"
    assert replays.hit_height == (PLOT_BOTTOM - PLOT_TOP) / 2 and replays.rate_text == "100%"
    assert busy.title == "01:00: 1 repeats, 3 carried out, 25% repeats"
    assert idle.x < busy.x < replays.x


def test_an_idle_day_draws_an_empty_axis():
    base = datetime(2030, 1, 1, tzinfo=UTC)
    chart = hit_rate_chart(
        [HourlyHits(hour=base + timedelta(hours=i), hits=0, first_executions=0) for i in range(24)]
    )
    assert chart.max_total == 1 and not any(b.first_height or b.hit_height for b in chart.bars)
