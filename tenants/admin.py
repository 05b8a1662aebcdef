"""Staff admin for tenants, memberships and API clients.

Secrets are never shown, not even their hashes: a key is issued (and shown once) from the
merchant dashboard or ``seed_demo``, so staff cannot add API clients here, only revoke them.

Memberships keep the dashboard's rule that a restaurant always has an owner: staff remove them
through the same service (:mod:`tenants.members`), and a change that would take the last
owner's role away, or move them to another restaurant, is refused by the form.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Count, Q, QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from config.admin_saves import SavesChangedFieldsOnly
from idempotency.admin.paging import BoundedCountList, IndexSortedChangeList
from tenants import credential_cache, login_admin, user_admin
from tenants.api_keys import revoke_api_key
from tenants.diner_sessions import end_sessions
from tenants.members import LAST_OWNER, MemberError, is_last_owner, lock_owners, remove_member
from tenants.models import ApiClient, DinerSession, Membership, Tenant

# accounts and groups: only superusers grant (tenants/user_admin.py)
user_admin.register()
# the login throttle's attempts: cleaning up needs the permission to delete them
login_admin.register()


STAFF_ACCOUNT = (
    "A platform staff account is made a member of a restaurant, or its membership changed, "
    "by a superuser only."
)


ROLE_BEYOND_MAKER = (
    "A {role} of a restaurant sees or does on its dashboard what you may not in the admin "
    "unless you hold {needed}: a superuser, or staff holding them, gives this role."
)


class MembershipForm(forms.ModelForm):
    """Refuses to take the role of owner from a restaurant's last owner (or to move them),
    to anyone but a superuser, a membership made or changed for a platform staff account, and
    a membership made or changed with a role its maker may not give
    (:func:`tenants.user_admin.naming_staff_accounts`)."""

    # set per request by the admin pages that show this form
    names_staff_accounts = False
    grantable_roles: frozenset[str] = frozenset()

    # The role the page showed. A role left as shown is kept as it is now: a page opened
    # before an owner demoted the member on the dashboard, and saved after (the tenant's page
    # for a new name), gave the member their former role back.
    role_shown = forms.CharField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Membership
        fields = ["user", "tenant", "role"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["role_shown"].initial = self.instance.role

    def _role_left_as_shown(self) -> bool:
        if self.instance.pk is None or not self.is_bound:
            return False
        sent = self.data.get(self.add_prefix("role"))
        return sent is not None and sent == self.data.get(self.add_prefix("role_shown"))

    @property
    def changed_data(self) -> list[str]:  # type: ignore[override]
        """What staff changed on the page: the role only when they chose another one than
        the page showed."""
        kept = {"role_shown", "role"} if self._role_left_as_shown() else {"role_shown"}
        return [name for name in super().changed_data if name not in kept]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self._role_left_as_shown() and "role" in data:
            data["role"] = self.instance.role  # as stored: applied after clean()
        user = data.get("user")
        staff_account = user is not None and (user.is_staff or user.is_superuser)
        made_or_changed = self.instance.pk is None or self.has_changed()
        if staff_account and made_or_changed and not self.names_staff_accounts:
            raise forms.ValidationError(STAFF_ACCOUNT)
        role = data.get("role")
        if made_or_changed and role and role not in self.grantable_roles:
            needed = ", ".join(user_admin.ROLE_PERMISSIONS[role])
            raise forms.ValidationError(ROLE_BEYOND_MAKER.format(role=role, needed=needed))
        before = self.instance  # as stored: the form's values are applied after clean()
        if before.pk is None:
            # a new membership takes no role from anyone (and has no tenant to read yet: the
            # add page answered every submit 500)
            return data
        moved = data.get("tenant", before.tenant) != before.tenant
        leaves = moved or data.get("role") != Membership.Role.OWNER
        if leaves:
            locked_owners(before.tenant)
            stored = Membership.objects.filter(pk=before.pk).first()
            if stored is not None and is_last_owner(stored):
                raise forms.ValidationError(LAST_OWNER)
        return data


def locked_owners(tenant: Tenant) -> None:
    """In the admin's save (one transaction from the form's checks to the save), lock the
    tenant's owners before "is another owner left?" is asked: unlocked, the dashboard or
    another staff member demoting the other owner at that instant passed the same check, and
    both saves left the restaurant without an owner. Outside a transaction (the form used on
    its own) there is no save to hold the answer for, and nothing is locked."""
    if transaction.get_connection().in_atomic_block:
        lock_owners(tenant)


class MembershipFormSet(forms.BaseInlineFormSet):
    """The tenant page's member rows, judged together: each row's form refuses to demote the
    last owner, but two owners demoted in one save each leave the other, and together none."""

    def clean(self) -> None:
        super().clean()
        tenant = self.instance
        if tenant.pk is None or any(self.errors):
            return
        locked_owners(tenant)
        rows = [form for form in self.forms if form.has_changed() or form.instance.pk]
        shown = [form.instance.pk for form in rows if form.instance.pk is not None]
        owners = Membership.objects.filter(tenant=tenant, role=Membership.Role.OWNER)
        if not owners.exists():
            return  # a restaurant without an owner yet (opened here): nothing to keep
        others = owners.exclude(pk__in=shown).exists()
        kept = any(form.cleaned_data.get("role") == Membership.Role.OWNER for form in rows)
        if not (others or kept):
            raise forms.ValidationError(LAST_OWNER)


def without_shown(
    model_admin: admin.options.BaseModelAdmin,
    request: HttpRequest,
    obj: Any,
    fields: Any,
    name: str,
) -> list[Any]:
    """``fields`` without ``name``, the hidden field that sends back what a page showed,
    when the page is one to view only: saving nothing, it has no use for it, and a page to
    view shows every field as text, this one too."""
    if model_admin.has_change_permission(request, obj):
        return list(fields)
    return [field for field in fields if field != name]


class KeyedAutocompleteSelect(AutocompleteSelect):
    """Django's search widget of a foreign key, showing only values that are keys at all.

    To show the chosen account or restaurant, the widget looks the form's value up in the
    database, unconverted: a value no key can be (``abc``, ``1,2``), sent in a form or in the
    add page's address (``?user=abc``), raised in that conversion while the page was drawn,
    a 500 where the form's own check says "Select a valid choice"."""

    def optgroups(self, name: str, value: list[Any], attr: Any = None) -> list[Any]:
        key = self.field.remote_field.get_related_field()
        return super().optgroups(name, [v for v in value if _is_key(key, v)], attr)


def _is_key(field: Any, value: Any) -> bool:
    try:
        field.to_python(value)
    except ValidationError:
        return False
    return True


class KeyedAutocompleteAdmin(admin.options.BaseModelAdmin):
    """An admin (or inline) whose ``autocomplete_fields`` use :class:`KeyedAutocompleteSelect`."""

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = KeyedAutocompleteSelect(
                db_field, self.admin_site, using=kwargs.get("using")
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class MembershipInline(KeyedAutocompleteAdmin, admin.TabularInline):
    model = Membership
    form = MembershipForm
    formset = MembershipFormSet
    extra = 0
    autocomplete_fields = ["user"]
    can_delete = False  # removed from the memberships list, through the service

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return without_shown(self, request, obj, super().get_fields(request, obj), "role_shown")

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = user_admin.naming_staff_accounts(formset.form, request)
        return formset


class ReadableJSONField(forms.JSONField):
    """Django's JSON form field, refusing as "Enter a valid JSON." all JSON it cannot hold.

    Django's field turns a syntax error into that form error, but let through what Python's
    reader raises besides (``RecursionError`` for arrays nested past its limit, ``ValueError``
    for an integer past its 4,300 digits), a 500; and a lone surrogate, read from its escape
    (``"\\ud800"``), went on to the page drawn again with the form's errors, which could not
    be encoded as UTF-8, a 500 too."""

    def to_python(self, value: Any) -> Any:
        if not _readable(value):
            raise ValidationError(
                self.error_messages["invalid"], code="invalid", params={"value": value}
            )
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if not self.disabled and not _readable(data):
            return InvalidJSONInput(data)  # shown again as typed
        return super().bound_data(data, initial)


def _readable(value: Any) -> bool:
    """Whether ``value``, text a form sent, is JSON that reads into values UTF-8 can write
    (anything else, not text, is for Django's field to judge)."""
    if not isinstance(value, str):
        return True
    try:
        json.dumps(json.loads(value), ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # a UnicodeEncodeError is a ValueError
        return False
    return True


class TenantForm(forms.ModelForm):
    """The tenant's page, sending back the status it showed (``status_shown``), so that its
    save can tell a status staff chose here from one the page merely showed."""

    status_shown = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["status_shown"].initial = self.instance.status


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "region", "status", "members", "active_keys", "created_at"]
    list_filter = ["status", "region"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created_at"]
    inlines = [MembershipInline]
    actions = ["suspend", "reactivate"]
    form = TenantForm
    formfield_overrides = {models.JSONField: {"form_class": ReadableJSONField}}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                member_count=Count("memberships", distinct=True),
                active_key_count=Count(
                    "api_clients", filter=Q(api_clients__revoked_at__isnull=True), distinct=True
                ),
            )
        )

    def get_fields(self, request: HttpRequest, obj: Tenant | None = None) -> list[Any]:
        fields = super().get_fields(request, obj)
        return without_shown(self, request, obj, fields, "status_shown")

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.status == Tenant.Status.OFFBOARDING:
            fields.append("status")
        return fields

    def formfield_for_choice_field(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """Only an offboarding sets ``offboarding`` (after waiting for the writes in flight)."""
        if db_field.name == "status":
            kwargs["choices"] = [
                choice for choice in Tenant.Status.choices if choice[0] != Tenant.Status.OFFBOARDING
            ]
        return super().formfield_for_choice_field(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        """Keep ``offboarding`` once an offboarding set it, though the form was opened before:
        saved back as it was shown, the tenant's tables reopened while they were exported and
        deleted (:mod:`tenants.write_fence`). Likewise a status staff left as the page showed
        it is kept as it is now: a page opened before a colleague suspended the tenant (or
        reactivated it) and saved after, for a new name, undid the suspension, and the
        tenant's keys answered again. Decided under the row's lock, which the offboarding's
        suspension and the list's actions' updates take too."""
        if change:
            current = (
                Tenant.objects.select_for_update().values_list("status", flat=True).get(pk=obj.pk)
            )
            if current == Tenant.Status.OFFBOARDING:
                obj.status = Tenant.Status.OFFBOARDING
            elif form.cleaned_data.get("status_shown") == obj.status:
                obj.status = current  # not changed on this page
        super().save_model(request, obj, form, change)

    @admin.display(description="members", ordering="member_count")
    def members(self, obj: Tenant) -> int:
        return obj.member_count  # type: ignore[attr-defined]

    @admin.display(description="active API keys", ordering="active_key_count")
    def active_keys(self, obj: Tenant) -> int:
        return obj.active_key_count  # type: ignore[attr-defined]

    @admin.action(description="Suspend selected tenants (API answers 403)", permissions=["change"])
    def suspend(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        n = _set_status(queryset, Tenant.Status.ACTIVE, Tenant.Status.SUSPENDED)
        self.message_user(request, f"{n} tenant(s) suspended.", messages.SUCCESS)

    @admin.action(description="Reactivate selected tenants", permissions=["change"])
    def reactivate(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        n = _set_status(queryset, Tenant.Status.SUSPENDED, Tenant.Status.ACTIVE)
        self.message_user(request, f"{n} tenant(s) reactivated.", messages.SUCCESS)


def _set_status(queryset: QuerySet[Tenant], current: str, new: str) -> int:
    """Move the tenants in ``current`` to ``new``, announced on the credential feed: an
    ``UPDATE`` sends no ``post_save``, and unannounced, every process kept the tenant's old
    status for its cache's full minute (a suspended restaurant's keys kept working)."""
    n = queryset.filter(status=current).update(status=new)
    if n:
        credential_cache.announce(credential_cache.EVERYTHING)
    return n


@admin.register(Membership)
class MembershipAdmin(KeyedAutocompleteAdmin, admin.ModelAdmin):
    form = MembershipForm
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]
    actions = ["remove_memberships"]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        """Usernames and slugs, which the list shows, for everyone; e-mail addresses only for
        staff who may see accounts (the accounts' pages show them). The list never shows an
        address: searched by staff who may not see accounts, the rows a fragment of one left
        told them the address one letter at a time."""
        fields = list(super().get_search_fields(request))
        if not user_admin.may_see_accounts(request):
            fields.remove("user__email")
        return fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return without_shown(self, request, obj, super().get_fields(request, obj), "role_shown")

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        return user_admin.naming_staff_accounts(form, request)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # it would delete a last owner too
        return actions

    def has_delete_permission(self, request: HttpRequest, obj: Membership | None = None) -> bool:
        """No delete page for a restaurant's last owner."""
        if obj is not None and is_last_owner(obj):
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        remove_member(tenant=obj.tenant, membership_id=obj.pk)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The page checks for another owner before it is shown and as it is confirmed, but
        unlocked: the other owner removed or demoted at that instant (the dashboard, another
        staff member), the removal itself refuses. Staff are told so on the membership's page
        (it stays), or sent to the list when someone removed it meanwhile."""
        try:
            return super().delete_view(request, object_id, extra_context)
        except MemberError as exc:
            self.message_user(request, f"Not removed: {exc}", messages.ERROR)
            return redirect("admin:tenants_membership_change", object_id)
        except Membership.DoesNotExist:
            self.message_user(request, "Removed meanwhile, by someone else.", messages.WARNING)
            return redirect("admin:tenants_membership_changelist")

    @admin.action(description="Remove selected memberships", permissions=["delete"])
    def remove_memberships(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        """Each through the dashboard's service: a restaurant's last owner stays (said so); one
        removed meanwhile (another staff member, the dashboard) is named as such."""
        removed, kept, gone = 0, [], []
        for membership in queryset.select_related("user", "tenant").order_by("pk"):
            named = f"{membership.user} ({membership.tenant.slug})"
            try:
                remove_member(tenant=membership.tenant, membership_id=membership.pk)
                removed += 1
            except MemberError:
                kept.append(named)
            except Membership.DoesNotExist:
                gone.append(named)
        self.message_user(request, f"{removed} membership(s) removed.", messages.SUCCESS)
        if kept:
            self.message_user(
                request,
                f"Kept, each a restaurant's last owner: {', '.join(kept)}.",
                messages.ERROR,
            )
        if gone:
            self.message_user(request, f"Removed meanwhile: {', '.join(gone)}.", messages.WARNING)


@admin.register(ApiClient)
class ApiClientAdmin(SavesChangedFieldsOnly):
    list_display = ["prefix", "tenant", "name", "kind", "is_test", "last_used_at", "revoked_at"]
    list_filter = ["kind", "is_test", ("revoked_at", admin.EmptyFieldListFilter), "tenant"]
    list_select_related = ["tenant"]
    search_fields = ["prefix", "name", "tenant__slug"]
    exclude = ["secret_hash"]
    # Every field: staff revoke keys (the action needs the change permission), and nothing
    # else. An editable kind let staff make a publishable key, which ships in every diner's
    # app, a merchant's secret key.
    readonly_fields = [
        "tenant",
        "prefix",
        "name",
        "kind",
        "is_test",
        "created_at",
        "issued_by",
        "issuer_gone",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        clients = list(queryset.filter(revoked_at__isnull=True))
        revoked = sum(revoke_api_key(client=client) for client in clients)
        self.message_user(request, f"{revoked} key(s) revoked.", messages.SUCCESS)


@admin.register(DinerSession)
class DinerSessionAdmin(BoundedCountList, SavesChangedFieldsOnly):
    """Read-only (sessions are opened through the API); staff may end sessions.

    A diner's app opens a guest session each time it starts, kept until it expires: the
    list is over a day of every restaurant's app openings, so it counts its rows only up to a
    bound (``BoundedCountList``), sorts only by the column an index serves, and its search
    goes through indexes (``get_search_results``)."""

    list_display = ["diner_id", "tenant", "is_guest", "created_at", "expires_at", "revoked_at"]
    list_filter = ["is_guest", ("revoked_at", admin.EmptyFieldListFilter), "tenant"]
    list_select_related = ["tenant"]
    search_fields = ["=diner_id", "=tenant__slug"]  # see get_search_results
    search_help_text = "A diner id or a restaurant's slug (exactly)"
    sortable_by = ["expires_at"]
    exclude = ["secret_hash"]
    # every field: staff end sessions (the action), nothing else; an editable revoked_at let
    # staff bring an ended session back
    readonly_fields = [
        "tenant",
        "diner_id",
        "client",
        "is_guest",
        "created_at",
        "expires_at",
        "revoked_at",
    ]
    actions = ["end"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return IndexSortedChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DinerSession], search_term: str
    ) -> tuple[QuerySet[DinerSession], bool]:
        """A diner's sessions by their id, or a restaurant's by its slug, each compared
        exactly. Django's search compares ``UPPER(column::text)``, which no index holds: every
        search read every session. A diner id is found through the index that leads with the
        restaurant (one probe per restaurant), a slug through the restaurants' own."""
        term = search_term.strip()
        if not term:
            return queryset, False
        tenants = list(Tenant.objects.values_list("pk", flat=True))
        named = list(Tenant.objects.filter(slug=term).values_list("pk", flat=True))
        found = Q(tenant_id__in=tenants, diner_id=term) | Q(tenant_id__in=named)
        return queryset.filter(found), False

    @admin.action(description="End selected sessions", permissions=["change"])
    def end(self, request: HttpRequest, queryset: QuerySet[DinerSession]) -> None:
        """Says how many this action ended, and how many were over already (ended or expired,
        before or while it ran)."""
        selected = list(queryset.values_list("pk", flat=True))
        ended = end_sessions(session_ids=selected)
        over = len(selected) - ended
        self.message_user(
            request,
            f"{ended} session(s) ended." + (f" {over} had ended already." if over else ""),
            messages.SUCCESS,
        )
