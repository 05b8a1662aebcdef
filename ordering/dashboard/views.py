"""Merchant dashboard pages (server-rendered), always inside the user's current tenant."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from ordering.models import OrderStatus
from ordering.selectors import orders_of
from tenants.selectors import current_membership, memberships_of, switch_tenant

View = Callable[..., HttpResponse]


def tenant_required(view: View) -> View:
    """Log-in required, and a membership: the page gets ``request.membership``."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        membership = current_membership(request)
        if membership is None:
            return render(request, "dashboard/no_tenant.html", status=403)
        request.membership = membership
        return view(request, *args, **kwargs)

    return wrapper


@tenant_required
def board(request: HttpRequest) -> HttpResponse:
    tenant = request.membership.tenant
    orders = orders_of(tenant=tenant).order_by("-created_at")[:200]
    columns = {status: [] for status in OrderStatus.values}
    for order in orders:
        columns[order.status].append(order)
    return render(
        request,
        "dashboard/board.html",
        {"columns": columns, "memberships": memberships_of(request.user)},
    )


@login_required
@require_POST
def switch_tenant_view(request: HttpRequest) -> HttpResponse:
    try:
        tenant_id = int(request.POST.get("tenant_id", ""))
    except ValueError:
        tenant_id = -1
    if switch_tenant(request, tenant_id) is None:
        messages.error(request, "You are not a member of that restaurant.")
    return redirect("board")
