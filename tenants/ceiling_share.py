"""How much of its tenant's write ceiling an API request may fill (the engine's
``RATE_LIMIT_CEILING_SHARE`` hook, docs/tenancy.md).

Anyone can open guest sessions with a tenant's publishable key, which is public, and each guest
is a principal with its own write limit: a handful of guests could otherwise take the tenant's
whole ceiling and leave the merchant's own writes (order transitions, signing diners in) at 429.
Guests therefore stop once the tenant's counter reaches ``API_GUEST_CEILING_SHARE`` of the
ceiling; the merchant's keys and the diners they sign in may go on to the full ceiling on the
same counter. The same share bounds the pre-issued tokens guests hold outstanding (the
engine's ``TOKEN_QUOTA_SHARE`` hook): otherwise enough guest sessions would fill the tenant's
token quota for a day and the merchant's keys would be refused tokens.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from tenants.models import ApiClient
from tenants.principals import ApiPrincipal

FULL_SHARE = 1.0


def ceiling_share_of(request: HttpRequest) -> float:
    """``API_GUEST_CEILING_SHARE`` for a guest (a session opened with the publishable key, or
    that key itself), 1.0 for everyone else: a merchant key, a diner a merchant key signed in,
    a dashboard member."""
    user = getattr(request, "user", None)
    if isinstance(user, ApiPrincipal) and user.client.kind == ApiClient.Kind.PUBLISHABLE:
        return float(settings.API_GUEST_CEILING_SHARE)
    return FULL_SHARE
