"""Members of the restaurant (owners only): add an existing user, change a role, remove."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import found, member_required, render_page, tenant_of
from ordering.dashboard.forms import MemberAddForm, MemberRoleForm
from tenants.members import MemberError, add_member, change_role, members_of, remove_member
from tenants.models import Membership
from tenants.permissions import Area


@member_required(Area.MEMBERS)
@require_http_methods(["GET", "HEAD", "POST"])
@idempotent_form(fields=("username", "role"))
def members(request: HttpRequest) -> HttpResponse:
    """GET: the members and an "add member" form. POST: add one."""
    tenant = tenant_of(request)
    form = MemberAddForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            added = add_member(tenant=tenant, **form.cleaned_data)
        except MemberError as exc:
            form.add_error("username", str(exc))
        else:
            messages.success(request, f"Added {added.user.get_username()} as {added.role}.")
            return redirect("dash-members")
    return render_page(
        request,
        "dashboard/members.html",
        {"members": members_of(tenant), "form": form, "roles": Membership.Role.choices},
        section="members",
        status=400 if form.is_bound else 200,
    )


@member_required(Area.MEMBERS)
@require_POST
@idempotent_form(fields=("role",), form_page="dash-members")
def member_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    found(Membership.objects.filter(tenant=tenant_of(request), pk=membership_id).first())
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Unknown role.")
        return redirect("dash-members")
    try:
        changed = change_role(
            tenant=tenant_of(request), membership_id=membership_id, role=form.cleaned_data["role"]
        )
    except Membership.DoesNotExist:
        raise Http404("Not found") from None
    except MemberError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{changed.user.get_username()} is now {changed.role}.")
    return redirect("dash-members")


@member_required(Area.MEMBERS)
@require_POST
@idempotent_form(fields=(), form_page="dash-members")
def member_remove(request: HttpRequest, membership_id: int) -> HttpResponse:
    try:
        removed = remove_member(tenant=tenant_of(request), membership_id=membership_id)
    except Membership.DoesNotExist:
        raise Http404("Not found") from None
    except MemberError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Removed {removed.user.get_username()}.")
    return redirect("dash-members")
