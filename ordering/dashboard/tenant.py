"""Switching the restaurant the dashboard works in (for users who belong to several)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import member_required
from tenants.permissions import Area
from tenants.selectors import switch_tenant


@member_required(Area.ACCOUNT)
@require_POST
@idempotent_form(fields=("tenant_id",), form_page="board")
def switch_tenant_view(request: HttpRequest) -> HttpResponse:
    """Only a tenant the user is a member of can become current; anything else changes nothing."""
    try:
        tenant_id = int(request.POST.get("tenant_id", ""))
    except ValueError:
        tenant_id = -1
    if switch_tenant(request, tenant_id) is None:
        messages.error(request, "You are not a member of that restaurant.")
    return redirect("board")
