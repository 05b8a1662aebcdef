"""``{% idempotency_field %}``: the one-time token every state-changing form carries."""

from __future__ import annotations

import secrets

from django import template
from django.utils.html import format_html

from idempotency.web.forms import FORM_FIELD

register = template.Library()


@register.simple_tag
def idempotency_field() -> str:
    """A hidden input with a fresh random key, new on every render of the form."""
    return format_html(
        '<input type="hidden" name="{}" value="{}">',
        FORM_FIELD,
        f"form-{secrets.token_urlsafe(16)}",
    )
