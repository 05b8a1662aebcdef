"""What every dashboard page shares: the tenant gate, the page renderer, the actor name.

Isolation rule: a page only ever reads through ``request.membership.tenant``. An id of another
tenant's row is answered exactly like an id that does not exist (404), so a merchant cannot even
learn that it exists.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ordering.services.menu import MenuError
from tenants.models import Membership, Tenant
from tenants.selectors import current_membership, memberships_of

View = Callable[..., HttpResponse]
T = TypeVar("T")


class TenantRequest(HttpRequest):
    """For type checkers: the request a :func:`tenant_required` view receives."""

    membership: Membership


def tenant_required(view: View) -> View:
    """Log-in required, and a membership: the page gets ``request.membership``, and shows
    times in the tenant's time zone.

    Put it outermost: ``@idempotent_form`` below it reads the membership to scope its keys.
    """

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        membership = current_membership(request)
        if membership is None:
            return render(request, "dashboard/no_tenant.html", status=403)
        request.membership = membership
        with timezone.override(membership.tenant.zone):
            return view(request, *args, **kwargs)

    return wrapper


def tenant_of(request: HttpRequest) -> Tenant:
    return request.membership.tenant  # type: ignore[attr-defined]


def actor_of(request: HttpRequest) -> str:
    """How a dashboard user appears in transition logs (API clients are ``api:<prefix>``)."""
    return f"merchant:{request.user.get_username()}"


def found(obj: T | None) -> T:
    """``obj`` or 404: the one way a page turns "not this tenant's" into "does not exist"."""
    if obj is None:
        raise Http404("Not found")
    return obj


def render_page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    section: str,
    status: int = 200,
) -> HttpResponse:
    """Render a dashboard page with what the layout needs (tenant switcher, current section)."""
    page = {"memberships": memberships_of(request.user), "section": section, **(context or {})}
    return render(request, template, page, status=status)


def save_posted(request: HttpRequest, form: Any, save: Callable[[dict[str, Any]], T]) -> T | None:
    """On a POST with a valid form, run ``save(cleaned_data)``; a refusal of the menu services
    becomes an error on its form field. None when nothing was saved (GET, or errors to show)."""
    if request.method != "POST" or not form.is_valid():
        return None
    try:
        return save(form.cleaned_data)
    except MenuError as exc:
        form.add_error(exc.field, exc.message)
        return None
