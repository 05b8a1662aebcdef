"""Accounts and groups in the Django admin: only superusers grant.

Platform staff create the restaurants' accounts and look after them (names, e-mail, active,
password), which takes "change user". With Django's own user admin that was everything: the
same form sets "superuser status", "staff status", groups and permissions, and the password
page sets anyone's password, a superuser's included; with "change group", a group one belongs
to takes any permission. So every permission the admin keeps apart (cancelling an order,
seeing what a diner wrote, erasing diners, the Lua scripts: docs/tenancy.md,
docs/data-protection.md, docs/lua-scripts.md) was one form away for whoever looks after
accounts.

Here, for anyone but a superuser, those fields are read-only (a value posted for them is
ignored, as for any read-only field), another platform staff account (staff or superuser)
can be viewed but not changed, given a password or deleted, and a membership names a
restaurant's own account only (:func:`naming_staff_accounts`). Superusers manage the admin as
Django's own user admin does.

A restaurant's membership is a grant too: its dashboard pages show what diners wrote on
orders, and a manager's cancel and refund them, an owner's erase diners, all of which the
admin keeps behind a permission. Staff give a role (:data:`ROLE_PERMISSIONS`), or set the
password of a member, and so may sign in as them, only holding those permissions themselves.

A password staff set for someone else (a new account's, or a new one on its password page) is
temporary (``tenants/temporary_passwords.py``): it lets its holder in only to choose their own.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django import forms
from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse

from tenants.models import Membership
from tenants.temporary_passwords import chosen_by_holder, set_by_another

T = TypeVar("T")
# What makes an account more than it is: granted by superusers only
GRANTS = ("is_superuser", "is_staff", "groups", "user_permissions")


# What each role's dashboard pages hold that the admin keeps behind a permission
# (docs/tenancy.md, "Dashboard roles"): the orders' notes, phones and addresses; cancelling
# an order, which refunds a paid one; erasing a diner.
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    Membership.Role.STAFF: ("ordering.view_diner_details",),
    Membership.Role.MANAGER: ("ordering.view_diner_details", "ordering.cancel_order"),
    Membership.Role.OWNER: (
        "ordering.view_diner_details",
        "ordering.cancel_order",
        "ordering.add_dinererasure",
    ),
}


def grants(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


def grantable_roles(request: HttpRequest) -> frozenset[str]:
    """The roles this request's user may give: those whose permissions they hold (a superuser
    holds every one)."""
    return frozenset(
        role for role, needed in ROLE_PERMISSIONS.items() if request.user.has_perms(needed)
    )


def may_see_accounts(request: HttpRequest) -> bool:
    """Whether the accounts' pages (e-mail addresses included) are this user's to view: "view
    user" or "change user", as Django's admin decides it for the accounts' list."""
    opts = User._meta
    return any(
        request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")
        for action in ("view", "change")
    )


class PlatformUserChangeForm(UserChangeForm):
    """An account's page, sending back whether it showed the account active
    (``is_active_shown``), so that its save can tell a box staff ticked or cleared from one
    the page merely showed."""

    is_active_shown = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["is_active_shown"].initial = str(self.instance.is_active)


class PlatformUserAdmin(UserAdmin):
    form = PlatformUserChangeForm

    def get_fieldsets(self, request: HttpRequest, obj: User | None = None) -> Any:
        """An account's page carries, beside "active", whether it showed the account so."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not self.has_change_permission(request, obj):
            return fieldsets  # a new account's, or a page to view only: saving nothing
        return [
            (name, {**opts, "fields": (*opts["fields"], "is_active_shown")})
            if "is_active" in opts["fields"]
            else (name, opts)
            for name, opts in fieldsets
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: User | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if not grants(request):
            fields += [name for name in GRANTS if name not in fields]
        return fields

    def has_change_permission(self, request: HttpRequest, obj: User | None = None) -> bool:
        """Covers the account's page and its password page (which asks this)."""
        if obj is not None and _another_staff_account(request, obj) and not grants(request):
            return False
        return super().has_change_permission(request, obj)

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        """A member's password signs in as the member: set only by staff who may give every
        role the account holds."""
        user = self.get_object(request, id)
        if user is not None:
            roles = set(Membership.objects.filter(user=user).values_list("role", flat=True))
            if not roles <= grantable_roles(request):
                raise PermissionDenied
        response = super().user_change_password(request, id, form_url)
        if user is not None:
            before = user.password
            user.refresh_from_db(fields=["password"])
            if user.password != before:  # saved (a new hash, even for the same password)
                _password_set(request, user)
        return response

    def save_model(self, request: HttpRequest, obj: User, form: ModelForm, change: bool) -> None:
        """A new account's password, when the form gave it one, is the one staff typed. An
        account left active or inactive as the page showed it is kept as it is now, read under
        the row's lock: a page opened before a colleague deactivated the account (its password
        leaked) and saved after, for a new e-mail address, made it active again."""
        if change and form.cleaned_data.get("is_active_shown") == str(obj.is_active):
            stored = User.objects.select_for_update().filter(pk=obj.pk)
            obj.is_active = stored.values_list("is_active", flat=True).get()
        super().save_model(request, obj, form, change)
        if not change:
            _password_set(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: User | None = None) -> bool:
        """Also asked per account by "Delete selected users"."""
        if obj is not None and _another_staff_account(request, obj) and not grants(request):
            return False
        return super().has_delete_permission(request, obj)


class PlatformGroupAdmin(GroupAdmin):
    def get_readonly_fields(self, request: HttpRequest, obj: Group | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if not grants(request) and "permissions" not in fields:
            fields.append("permissions")
        return fields


def naming_staff_accounts(form: type[T], request: HttpRequest) -> type[T]:
    """``form`` (a membership's, ``tenants.admin.MembershipForm``) told whether this request
    may name a platform staff account (only a superuser's) and which roles it may give
    (:func:`grantable_roles`). A membership opens the dashboard, whose order pages show the
    note, phone and address of every order: staff adding their own account (or a colleague's,
    or a new one whose password they chose) to a restaurant read there what the admin shows
    only with "view diner details", and held a restaurant's keys and members."""
    granted = {"names_staff_accounts": grants(request), "grantable_roles": grantable_roles(request)}
    return type(form.__name__, (form,), granted)


def _password_set(request: HttpRequest, user: User) -> None:
    """``user``'s password was just set on the admin's pages: temporary, unless the signed-in
    account set its own, or none was set (no password anyone knows)."""
    if user.has_usable_password() and user.pk != request.user.pk:
        set_by_another(user)
    else:
        chosen_by_holder(user)


def _another_staff_account(request: HttpRequest, user: User) -> bool:
    """A platform staff account (staff or superuser) other than the signed-in one: its
    password would sign in as someone holding what one does not."""
    return bool(user.is_staff or user.is_superuser) and user.pk != request.user.pk


def register() -> None:
    """Put these in place of Django's own (``django.contrib.auth`` registers first: it is
    listed before this app)."""
    for model, model_admin in ((User, PlatformUserAdmin), (Group, PlatformGroupAdmin)):
        if admin.site.is_registered(model):
            admin.site.unregister(model)
        admin.site.register(model, model_admin)
