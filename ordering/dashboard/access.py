"""What every dashboard page shares: the tenant and role gate, the page renderer, the actor name.

Isolation rule: a page only ever reads through ``request.membership.tenant``. An id of another
tenant's row is answered exactly like an id that does not exist (404), so a merchant cannot even
learn that it exists.

Role rule: every view is wrapped in :func:`member_required` with the :class:`Area` it belongs to;
``tenants.permissions.DASHBOARD_ACCESS`` says which role reaches which area (403 below it).

Form rule: a form acts on the restaurant whose page showed it. The restaurant is the session's
choice, and a user of several switches it for every tab at once; so each dashboard form carries
the restaurant it was shown for (``{% form_restaurant %}``, :data:`FORM_TENANT_FIELD`), and a
submit from a page of another restaurant than the current one changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from idempotency.web.forms import same_site_referer
from ordering.services.menu import MenuError
from tenants.models import Membership, Tenant
from tenants.permissions import DASHBOARD_ACCESS, Area, areas_of, role_reaches
from tenants.selectors import current_membership, memberships_of
from tenants.write_fence import refused_by_fence

View = Callable[..., HttpResponse]
T = TypeVar("T")
# The hidden field naming the restaurant a form was shown for (``{% form_restaurant %}``)
FORM_TENANT_FIELD = "form_restaurant"


class TenantRequest(HttpRequest):
    """For type checkers: the request a :func:`tenant_required` view receives."""

    membership: Membership


def member_required(area: Area) -> Callable[[View], View]:
    """Log-in required, a membership, and a role that reaches ``area``: the page gets
    ``request.membership`` and shows times in the tenant's time zone; a lesser role gets 403
    before anything runs.

    Put it outermost: ``@idempotent_form`` below it reads the membership to scope its keys, and
    a refused request must not reach it.
    """

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return _to_log_in(request)
            membership = current_membership(request)
            if membership is None:
                return render(request, "dashboard/no_tenant.html", status=403)
            request.membership = membership
            if _shown_for_another_restaurant(request, membership):
                return _not_applied_here(request, membership)
            if not role_reaches(membership.role, area):
                return forbidden(request, area)
            try:
                with timezone.override(membership.tenant.zone):
                    return view(request, *args, **kwargs)
            except DatabaseError as exc:
                if not refused_by_fence(exc):
                    raise
                # signed in before its restaurant's offboarding began, written after: the
                # page a member of a suspended restaurant gets (nothing of it was kept)
                return render(request, "dashboard/no_tenant.html", status=403)

        wrapper.dashboard_area = area  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _to_log_in(request: HttpRequest) -> HttpResponse:
    """The sign-in page, then back. A form submitted after its session ended (expired, or
    signed out in another tab) did nothing: the person is told so, and comes back to the page
    the form was on, not to the URL it posted to (most take only POST: a blank 405)."""
    if request.method in ("GET", "HEAD"):
        return redirect_to_login(request.get_full_path())
    messages.error(
        request,
        "You were signed out, so nothing was done. Sign in, then submit the form again.",
    )
    return redirect_to_login(_form_page(request))


def _form_page(request: HttpRequest) -> str:
    """The dashboard page a form was posted from (the ``Referer``, when it is one of this
    site's dashboard pages), else the board."""
    referer = same_site_referer(request)
    if referer is not None:
        page = urlsplit(referer)
        if page.path.startswith("/dashboard/"):
            return urlunsplit(("", "", page.path, page.query, ""))
    return reverse("board")


def _shown_for_another_restaurant(request: HttpRequest, membership: Membership) -> bool:
    """A POST from a form shown while another restaurant was current (the user switched, or
    lost that restaurant, in another tab since). A POST without the field (not one of the
    dashboard's forms) is judged by the current restaurant alone, as before."""
    if request.method != "POST":
        return False
    shown_for = request.POST.get(FORM_TENANT_FIELD)
    return shown_for is not None and shown_for != str(membership.tenant_id)


def _not_applied_here(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Why the form did nothing: the user switched restaurants in another tab (they can
    switch back), or the form's restaurant is no longer one of theirs (removed by its owner,
    or suspended), where switching back is not possible. The form's restaurant is not named:
    its id came from the browser."""
    shown_for = request.POST.get(FORM_TENANT_FIELD)
    if any(str(m.tenant_id) == shown_for for m in memberships_of(request.user)):
        why = (
            "Nothing was done: that form was shown for another restaurant, and the dashboard "
            f"now works in {membership.tenant.name} (switched in another tab). Open the page "
            "again here, or switch back, to submit it."
        )
    else:
        why = (
            "Nothing was done: that form was shown for a restaurant you are no longer a member "
            f"of (or that was suspended); the dashboard now works in {membership.tenant.name}."
        )
    messages.error(request, why)
    return redirect("board")


def may_reach(request: HttpRequest, area: Area) -> bool:
    """For an action inside a page whose area is wider (e.g. cancelling from the order page)."""
    return role_reaches(request.membership.role, area)  # type: ignore[attr-defined]


def forbidden(request: HttpRequest, area: Area) -> HttpResponse:
    return render_page(
        request,
        "dashboard/forbidden.html",
        {"needed": Membership.Role(DASHBOARD_ACCESS[area]).label},
        section="",
        status=403,
    )


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
    membership = getattr(request, "membership", None)
    page = {
        "memberships": memberships_of(request.user),
        "section": section,
        "areas": areas_of(membership.role) if membership else frozenset(),
        **(context or {}),
    }
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
