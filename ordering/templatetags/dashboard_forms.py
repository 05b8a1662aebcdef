"""``{% form_restaurant %}``: the restaurant a dashboard form was shown for, in a hidden field.

:func:`ordering.dashboard.access.member_required` refuses a submit whose restaurant is no longer
the current one (a switch in another tab), so a form never acts on a restaurant it was not
shown for.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

from ordering.dashboard.access import FORM_TENANT_FIELD

register = template.Library()


@register.simple_tag(takes_context=True)
def form_restaurant(context: dict[str, Any]) -> str:
    membership = getattr(context.get("request"), "membership", None)
    if membership is None:
        return ""
    return format_html(
        '<input type="hidden" name="{}" value="{}">', FORM_TENANT_FIELD, membership.tenant_id
    )
