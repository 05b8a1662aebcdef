"""``{{ order.created_at|age:now }}``: how long ago an order was placed, as the board shows it.

The board's script (``ordering/static/dashboard/board.js``, ``ageLabel``) writes the same words
again on every poll, from each card's ``datetime`` and the server's clock: a poll answered
"not modified" keeps the cards and only the ages move on. The two must agree; a browser test
compares them.
"""

from __future__ import annotations

from datetime import datetime

from django import template

register = template.Library()


@register.filter
def age(placed: datetime, now: datetime) -> str:
    """Under a minute "just now", then "4 min ago", "2 h 5 min ago", "3 d 1 h ago"."""
    return age_label((now - placed).total_seconds())


def age_label(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return "just now"
    if minutes < 60:
        return f"{minutes} min ago"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min ago" if minutes else f"{hours} h ago"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h ago" if hours else f"{days} d ago"
