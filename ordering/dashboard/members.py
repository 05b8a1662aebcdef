"""Members of the restaurant (owners only): add an existing user, change a role, remove."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import (
    forbidden,
    may_reach,
    member_required,
    render_page,
    tenant_of,
)
from ordering.dashboard.forms import MemberAddForm, MemberRoleForm
from tenants.key_issuers import left_with_keys_message
from tenants.members import MemberError, add_member, change_role, members_of, remove_member
from tenants.models import Membership
from tenants.permissions import Area, role_reaches


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
    return _members_page(request, form, status=400 if form.is_bound else 200)


def _members_page(request: HttpRequest, form: MemberAddForm, *, status: int) -> HttpResponse:
    return render_page(
        request,
        "dashboard/members.html",
        {"members": members_of(tenant_of(request)), "form": form, "roles": Membership.Role.choices},
        section="members",
        status=status,
    )


def _not_a_member(request: HttpRequest) -> HttpResponse:
    """A membership id that is not (or no longer) this restaurant's: most often a member
    another tab, or another owner, removed after this page was shown. The person gets the
    members as they are now and a word, not a bare "Not found" page; still a 404, the same
    for an id of another restaurant as for one that never was (nothing to learn from it)."""
    messages.error(
        request,
        "That person is not a member here (removed already, perhaps in another tab or by "
        "another owner), so nothing was changed.",
    )
    return _members_page(request, MemberAddForm(), status=404)


@member_required(Area.ACCOUNT)
def member_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    """A role change, for owners (``Area.MEMBERS``); a member below that is refused (403),
    unless the change they send is their own, already made: see :func:`_made_already`."""
    if not may_reach(request, Area.MEMBERS):
        return _made_already(request, membership_id) or forbidden(request, Area.MEMBERS)
    return _change_role(request, membership_id)


def _made_already(request: HttpRequest, membership_id: int) -> HttpResponse | None:
    """The board and a word, for an owner's step down sent again once it was made: the
    second press of a double click arriving after the first was done (the role gate, before
    the form's replay, then reads the new role), or the same change from a members page left
    open in another tab. Their change is in place, and "Not allowed, this needs the Owner
    role" read as if it had failed. None for anything else: a member below owner may change
    no role."""
    own = request.membership  # type: ignore[attr-defined]
    if request.method != "POST" or own.pk != membership_id or request.POST.get("role") != own.role:
        return None
    messages.info(
        request,
        f"{request.user.get_username()} is now {own.role}: that change was made already, so "
        "nothing more was changed.",
    )
    return redirect("board")


@require_POST
@idempotent_form(fields=("role",), form_page="dash-members")
def _change_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    if not Membership.objects.filter(tenant=tenant_of(request), pk=membership_id).exists():
        return _not_a_member(request)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Unknown role.")
        return redirect("dash-members")
    try:
        changed = change_role(
            tenant=tenant_of(request), membership_id=membership_id, role=form.cleaned_data["role"]
        )
    except Membership.DoesNotExist:
        return _not_a_member(request)
    except MemberError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{changed.user.get_username()} is now {changed.role}.")
        if not role_reaches(changed.role, Area.API_KEYS):
            _warn_of_keys_known(request, changed)
        if changed.user_id == request.user.pk and not role_reaches(changed.role, Area.MEMBERS):
            return redirect("board")  # stepped down: the members page is not theirs now
    return redirect("dash-members")


@member_required(Area.MEMBERS)
@require_POST
@idempotent_form(fields=(), form_page="dash-members")
def member_remove(request: HttpRequest, membership_id: int) -> HttpResponse:
    try:
        removed = remove_member(tenant=tenant_of(request), membership_id=membership_id)
    except Membership.DoesNotExist:
        return _not_a_member(request)
    except MemberError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Removed {removed.user.get_username()}.")
        _warn_of_keys_known(request, removed)
        if removed.user_id == request.user.pk:
            return redirect("board")  # left: the members page is not theirs now
    return redirect("dash-members")


def _warn_of_keys_known(request: HttpRequest, left: Membership) -> None:
    """Tell the owners of the live secret keys ``left`` issued, which still work
    (:mod:`tenants.key_issuers`)."""
    warning = left_with_keys_message(
        tenant=tenant_of(request), user_id=left.user_id, name=left.user.get_username()
    )
    if warning:
        messages.warning(request, warning)
