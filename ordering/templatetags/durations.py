"""``{{ cooloff_timedelta|duration }}``: a length of time in words ("15 minutes", "1 hour
30 minutes"), where Django would print a ``timedelta`` as ``0:15:00``."""

from __future__ import annotations

from datetime import timedelta

from django import template

register = template.Library()


@register.filter
def duration(length: timedelta) -> str:
    minutes = max(1, round(length.total_seconds() / 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    return " ".join(f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts if n)
