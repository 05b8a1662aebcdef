"""Staff keep the dashboard's rule in the admin: a restaurant always has an owner (red with
the admin's own delete action, delete page or form: the last owner removed or demoted)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tenants.members import change_role, remove_member
from tenants.models import Membership, Tenant
from tests.support.concurrency import committed_once_waited_on

pytestmark = pytest.mark.django_db
OWNER, MANAGER = Membership.Role.OWNER, Membership.Role.MANAGER


@pytest.fixture
def staff() -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.fixture
def restaurant() -> tuple[Tenant, Membership, Membership]:
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    owner = Membership.objects.create(
        tenant=tenant, user=User.objects.create(username="o"), role=OWNER
    )
    manager = Membership.objects.create(
        tenant=tenant, user=User.objects.create(username="m"), role=MANAGER
    )
    return tenant, owner, manager


def test_removing_the_last_owner_in_bulk_keeps_them_and_says_so(staff, restaurant):
    tenant, owner, manager = restaurant
    answer = staff.post(
        "/admin/tenants/membership/",
        {"action": "remove_memberships", "_selected_action": [owner.pk, manager.pk]},
        follow=True,
    )
    assert answer.status_code == 200
    assert list(Membership.objects.filter(tenant=tenant).values_list("role", flat=True)) == [OWNER]
    text = answer.content.decode()
    assert "1 membership(s) removed." in text and "last owner: o (roma)" in text
    assert "delete_selected" not in staff.get("/admin/tenants/membership/").content.decode()


def test_the_last_owner_has_no_delete_page_and_another_owner_makes_it_possible(staff, restaurant):
    _, owner, manager = restaurant
    url = f"/admin/tenants/membership/{owner.pk}/delete/"
    assert staff.post(url, {"post": "yes"}).status_code == 403
    assert Membership.objects.filter(pk=owner.pk).exists()
    manager.role = OWNER
    manager.save()
    assert staff.post(url, {"post": "yes"}).status_code == 302
    assert not Membership.objects.filter(pk=owner.pk).exists()


def test_the_form_refuses_to_demote_or_move_the_last_owner(staff, restaurant):
    tenant, owner, _ = restaurant
    other = Tenant.objects.create(slug="kyoto", name="Kyoto")
    url = f"/admin/tenants/membership/{owner.pk}/change/"
    for change in ({"role": MANAGER, "tenant": tenant.pk}, {"role": OWNER, "tenant": other.pk}):
        answer = staff.post(url, {"user": owner.user.pk, **change})
        assert answer.status_code == 200 and b"needs at least one owner" in answer.content
    owner.refresh_from_db()
    assert (owner.tenant, owner.role) == (tenant, OWNER)


def post_tenant_page(
    staff: Client,
    tenant: Tenant,
    roles: dict[Membership, str],
    users: dict[Membership, object] | None = None,
) -> object:
    """Save the tenant's admin page as shown, with its member rows' roles set to ``roles``
    (and, given ``users``, their accounts to what it says, as sent)."""
    page = staff.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in data.items()}
    formset = page.context["inline_admin_formsets"][0].formset
    data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
    for row in formset.forms:
        membership = row.instance
        data.update(
            {
                f"{row.prefix}-id": membership.pk,
                f"{row.prefix}-tenant": tenant.pk,
                f"{row.prefix}-user": (users or {}).get(membership, membership.user_id),
                f"{row.prefix}-role": roles.get(membership, membership.role),
            }
        )
    return staff.post(f"/admin/tenants/tenant/{tenant.pk}/change/", data)


def test_the_tenant_page_refuses_to_demote_every_owner_in_one_save(staff, restaurant):
    """Two owners, both demoted on the tenant's page in one save: each row alone leaves an
    owner, together none (red: saved, a restaurant nobody could manage keys or members of)."""
    tenant, owner, manager = restaurant
    manager.role = OWNER
    manager.save()

    answer = post_tenant_page(staff, tenant, {owner: MANAGER, manager: MANAGER})

    assert answer.status_code == 200 and b"needs at least one owner" in answer.content
    assert sorted(Membership.objects.filter(tenant=tenant).values_list("role", flat=True)) == [
        OWNER,
        OWNER,
    ]
    # one of them demoted is fine
    assert post_tenant_page(staff, tenant, {owner: MANAGER}).status_code == 302
    assert Membership.objects.get(pk=owner.pk).role == MANAGER


@pytest.mark.django_db(transaction=True)
def test_two_owners_demoted_at_once_one_on_the_dashboard_one_in_the_admin_leave_an_owner():
    """An owner demotes a co-owner on the dashboard while staff demote the other in the admin's
    membership form, at once: the form's check runs after the dashboard's change commits,
    so it refuses (red: the check read both as owners, both saves went through, no owner)."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    first, second = (
        Membership.objects.create(
            tenant=tenant, user=User.objects.create(username=name), role=OWNER
        )
        for name in ("o1", "o2")
    )
    staff = Client(raise_request_exception=False)
    staff.force_login(User.objects.create_superuser("root", password=None))

    def demote_on_the_dashboard() -> None:
        change_role(tenant=tenant, membership_id=second.pk, role=MANAGER)

    with committed_once_waited_on(demote_on_the_dashboard):
        answer = staff.post(
            f"/admin/tenants/membership/{first.pk}/change/",
            {"user": first.user.pk, "tenant": tenant.pk, "role": MANAGER},
        )

    assert answer.status_code == 200 and b"needs at least one owner" in answer.content
    assert dict(Membership.objects.values_list("user__username", "role")) == {
        "o1": OWNER,
        "o2": MANAGER,
    }


@pytest.mark.django_db(transaction=True)
def test_two_owners_removed_at_once_one_on_the_dashboard_one_on_the_admin_s_delete_page():
    """An owner removes a co-owner on the dashboard while staff confirm the other's delete page,
    at once: the page checked for another owner before the dashboard's change committed, the
    removal itself refuses; staff are told so, not shown a server error (red: 500)."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    first, second = (
        Membership.objects.create(
            tenant=tenant, user=User.objects.create(username=name), role=OWNER
        )
        for name in ("o1", "o2")
    )
    staff = Client(raise_request_exception=False)
    staff.force_login(User.objects.create_superuser("root", password=None))
    with committed_once_waited_on(lambda: remove_member(tenant=tenant, membership_id=second.pk)):
        answer = staff.post(f"/admin/tenants/membership/{first.pk}/delete/", {"post": "yes"})

    assert answer.status_code == 302
    assert answer["Location"] == f"/admin/tenants/membership/{first.pk}/change/"
    shown = staff.get(answer["Location"]).content.decode()
    assert "Not removed: A restaurant needs at least one owner." in shown
    assert list(Membership.objects.values_list("user__username", "role")) == [("o1", OWNER)]


@pytest.mark.django_db(transaction=True)
def test_a_membership_removed_meanwhile_is_not_reported_as_a_last_owner_kept():
    """Two staff remove the same manager at once ("Remove selected memberships", or one on
    the dashboard): the one that finds it gone says so (red: "Kept, each a restaurant's last
    owner: m (roma)", about a manager, who was removed)."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    Membership.objects.create(tenant=tenant, user=User.objects.create(username="o"), role=OWNER)
    manager = Membership.objects.create(
        tenant=tenant, user=User.objects.create(username="m"), role=MANAGER
    )
    staff = Client(raise_request_exception=False)
    staff.force_login(User.objects.create_superuser("root", password=None))
    with committed_once_waited_on(lambda: remove_member(tenant=tenant, membership_id=manager.pk)):
        answer = staff.post(
            "/admin/tenants/membership/",
            {"action": "remove_memberships", "_selected_action": [manager.pk]},
            follow=True,
        )

    text = answer.content.decode()
    assert "last owner" not in text
    assert "0 membership(s) removed." in text and "Removed meanwhile: m (roma)." in text
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["o"]


def test_staff_add_a_member_on_the_add_page(staff, restaurant):
    """The memberships' "Add" page (how staff add a person of several restaurants,
    docs/tenancy.md) saves the membership (red: its form read the tenant of the membership
    not made yet, and every submit answered 500)."""
    tenant, _, _ = restaurant
    anna = User.objects.create_user("anna")
    answer = staff.post(
        "/admin/tenants/membership/add/", {"user": anna.pk, "tenant": tenant.pk, "role": MANAGER}
    )
    assert answer.status_code == 302
    assert Membership.objects.filter(user=anna, tenant=tenant, role=MANAGER).exists()


REFUSED = b"Please correct the error below."


@pytest.mark.parametrize("value", ["abc", "1,2", "1e999", "\x00"])
def test_a_member_row_naming_no_account_or_restaurant_by_its_key_is_refused_by_the_form(
    staff, restaurant, value
):
    """A user or tenant that is no key at all, in a membership's form, the tenant page's
    member rows or the add page's address, is an error of the form (red: 500: the fields'
    search widget looked the value up as a key to show it, and the conversion raised)."""
    tenant, owner, manager = restaurant
    add = "/admin/tenants/membership/add/"
    for data in (
        {"user": value, "tenant": tenant.pk, "role": MANAGER},
        {"user": User.objects.create_user(f"new{len(value)}").pk, "tenant": value, "role": MANAGER},
    ):
        answer = staff.post(add, data)
        assert answer.status_code == 200 and REFUSED in answer.content
    change = staff.post(
        f"/admin/tenants/membership/{manager.pk}/change/",
        {"user": value, "tenant": tenant.pk, "role": MANAGER},
    )
    assert change.status_code == 200 and REFUSED in change.content
    row = post_tenant_page(staff, tenant, {}, users={manager: value})
    assert row.status_code == 200 and REFUSED in row.content
    shown = staff.get(add, {"user": value, "tenant": value})
    assert shown.status_code == (400 if "\x00" in value else 200)  # a page's query: no NUL
    assert list(Membership.objects.filter(tenant=tenant).order_by("pk")) == [owner, manager]


# The admin permissions each role's dashboard pages hold (docs/tenancy.md, "Dashboard roles"):
# what diners wrote on orders; cancelling one, refunding it; erasing a diner
ROLE_CODENAMES = {
    Membership.Role.STAFF: ("view_diner_details",),
    MANAGER: ("view_diner_details", "cancel_order"),
    OWNER: ("view_diner_details", "cancel_order", "add_dinererasure"),
}


def staff_who_add_members(*more: str) -> tuple[User, Client]:
    """Platform staff who may add memberships (and, with ``more``, change tenants), nothing
    else: not seeing what diners wrote on orders (``ordering.view_diner_details``)."""
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("support", password="x-123456789", is_staff=True)
    codenames = ("add_membership", "view_membership", "view_user", *more)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return user, client


def test_staff_cannot_make_themselves_or_another_staff_account_a_member(restaurant):
    """A membership opens the dashboard's pages, where a member sees the note, phone and
    address of every order: staff adding their own account (or a colleague's) to a restaurant
    read what the admin shows only with "view diner details" (red: the membership was made)."""
    tenant, _, _ = restaurant
    support, client = staff_who_add_members(*ROLE_CODENAMES[OWNER])  # may give any role
    colleague = User.objects.create_user("colleague", is_staff=True)
    root = User.objects.create_superuser("root2", password=None)

    for account in (support, colleague, root):
        answer = client.post(
            "/admin/tenants/membership/add/",
            {"user": account.pk, "tenant": tenant.pk, "role": OWNER},
        )
        assert answer.status_code == 200  # the form again, with the error
        assert not Membership.objects.filter(user=account).exists()

    # a restaurant's own account is added as before
    anna = User.objects.create_user("anna")
    answer = client.post(
        "/admin/tenants/membership/add/", {"user": anna.pk, "tenant": tenant.pk, "role": MANAGER}
    )
    assert answer.status_code == 302
    assert Membership.objects.filter(user=anna, tenant=tenant, role=MANAGER).exists()


def tenant_page(tenant: Tenant, name: str, *members: Membership, new: tuple = ()) -> dict:
    """The tenant's admin page as sent with ``name``: a row per member as it is, and given
    ``new`` (an account and a role), one more row adding it."""
    data: dict = {"slug": tenant.slug, "name": name, "region": tenant.region}
    data.update(status=tenant.status, time_zone=tenant.time_zone, redacted_paths="[]")
    rows = [(m.pk, m.user_id, m.role) for m in members] + ([("", *new)] if new else [])
    data.update(
        {"memberships-TOTAL_FORMS": str(len(rows)), "memberships-INITIAL_FORMS": str(len(members))}
    )
    for i, (pk, user, role) in enumerate(rows):
        row = {"tenant": tenant.pk, "user": user, "role": role, **({"id": pk} if pk else {})}
        data.update({f"memberships-{i}-{field}": value for field, value in row.items()})
    return data


@pytest.mark.parametrize("role", list(ROLE_CODENAMES))
def test_a_membership_opens_no_more_than_its_maker_may_see_and_do_in_the_admin(restaurant, role):
    """Staff who may add memberships but not see what diners wrote (nor cancel orders, nor
    erase diners) made a new account of their own the owner of any restaurant, signed in to
    its dashboard and read, cancelled and erased there what the admin keeps from them (red:
    the membership was made). A role is given by a superuser, or by staff who hold in the
    admin what its pages hold; a row that is not changed is no grant."""
    tenant, _, _ = restaurant
    needed = ROLE_CODENAMES[role]
    anna = User.objects.create_user("anna", password="x-123456789")
    add = {"user": anna.pk, "tenant": tenant.pk, "role": role}
    for held in [(), *(tuple(c for c in needed if c != lacking) for lacking in needed)]:
        User.objects.filter(username="support").delete()
        _, client = staff_who_add_members(*held)
        answer = client.post("/admin/tenants/membership/add/", add)
        assert answer.status_code == 200, held  # the form again, naming what is missing
        assert b"what you may not" in answer.content
        assert not Membership.objects.filter(user=anna).exists()
    User.objects.filter(username="support").delete()
    _, client = staff_who_add_members(*needed)
    assert client.post("/admin/tenants/membership/add/", add).status_code == 302
    assert Membership.objects.filter(user=anna, tenant=tenant, role=role).exists()


def test_the_tenant_page_s_member_rows_refuse_a_role_beyond_its_maker(restaurant):
    tenant, owner, manager = restaurant
    _, client = staff_who_add_members("change_tenant", "view_tenant", "change_membership")
    anna = User.objects.create_user("anna")
    url = f"/admin/tenants/tenant/{tenant.pk}/change/"
    # the rows as they are: the rest of the page is saved
    assert client.post(url, tenant_page(tenant, "Roma Centro", owner, manager)).status_code == 302
    adding = tenant_page(tenant, "Roma Centro", owner, manager, new=(anna.pk, MANAGER))
    assert client.post(url, adding).status_code == 200
    assert not Membership.objects.filter(user=anna).exists()


def test_the_tenant_page_s_member_rows_refuse_a_staff_account_too(restaurant):
    tenant, owner, manager = restaurant
    support, client = staff_who_add_members(
        "change_tenant", "view_tenant", "change_membership", *ROLE_CODENAMES[OWNER]
    )
    page = tenant_page(tenant, tenant.name, owner, manager, new=(support.pk, OWNER))

    client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", page)

    assert not Membership.objects.filter(user=support).exists()


def test_a_staff_member_a_superuser_added_leaves_the_tenant_page_editable(restaurant):
    """An unchanged member row of a platform staff account (added by a superuser) does not
    stop staff from saving the rest of the tenant's page."""
    tenant, owner, _ = restaurant
    colleague = User.objects.create_user("colleague", is_staff=True)
    theirs = Membership.objects.create(tenant=tenant, user=colleague, role=MANAGER)
    Membership.objects.filter(tenant=tenant).exclude(pk__in=[owner.pk, theirs.pk]).delete()
    _, client = staff_who_add_members(
        "change_tenant", "view_tenant", "change_membership", *ROLE_CODENAMES[OWNER]
    )
    page = tenant_page(tenant, "Roma Centro", owner, theirs)

    answer = client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", page)

    assert answer.status_code == 302
    assert Tenant.objects.get(pk=tenant.pk).name == "Roma Centro"
    page["memberships-1-role"] = OWNER  # but the staff account's role is not theirs to change
    answer = client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", page)
    assert answer.status_code == 200
    assert Membership.objects.get(pk=theirs.pk).role == MANAGER


def test_a_superuser_still_makes_a_staff_account_a_member(staff, restaurant):
    tenant, _, _ = restaurant
    colleague = User.objects.create_user("colleague", is_staff=True)
    answer = staff.post(
        "/admin/tenants/membership/add/", {"user": colleague.pk, "tenant": tenant.pk, "role": OWNER}
    )
    assert answer.status_code == 302
    assert Membership.objects.filter(user=colleague, tenant=tenant).exists()


@pytest.mark.parametrize(
    ("also", "finds_by_email"),
    [
        ((), False),
        (("view_user",), True),
        (("change_user",), True),
    ],
    ids=["memberships-only", "with-view-user", "with-change-user"],
)
def test_the_memberships_search_reads_e_mail_addresses_only_for_who_may_see_accounts(
    restaurant, also, finds_by_email
):
    """The memberships' list shows each member's username, never their e-mail address, which
    the accounts' pages show to staff who may view accounts. Searched by staff who may not,
    the rows an address's fragment left told them the address one letter at a time (red: the
    fragment found the member without "view user"). Usernames and slugs are searched for
    everyone, as the list shows them."""
    from django.contrib.auth.models import Permission

    _, owner, _ = restaurant
    User.objects.filter(pk=owner.user.pk).update(
        username="giulia", email="g.rossi@private-mail.example"
    )
    user = User.objects.create_user("support", password="x-123456789", is_staff=True)
    codenames = ("view_membership", *also)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)

    def found(term: str) -> list[int]:
        answer = client.get("/admin/tenants/membership/", {"q": term})
        assert answer.status_code == 200
        return sorted(m.pk for m in answer.context["cl"].result_list)

    assert found("rossi@private") == ([owner.pk] if finds_by_email else [])
    assert found("g.rossi@private-mail.example") == ([owner.pk] if finds_by_email else [])
    assert found("giulia") == [owner.pk]
    assert len(found("roma")) == 2  # the restaurant's slug: both its members


def test_a_tenant_page_open_before_a_demotion_saved_after_it_keeps_the_demotion(staff, restaurant):
    """Red before: the page sent back each member's role as it had shown it, and the form
    wrote what differed from the role as it is now: staff renaming a restaurant in a tab
    opened before its owner demoted a manager to staff (on the dashboard) gave the manager
    their role back."""
    tenant, owner, manager = restaurant
    page = staff.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in data.items()}
    formset = page.context["inline_admin_formsets"][0].formset
    data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
    for row in formset.forms:
        data.update({f"{row.prefix}-{name}": row[name].value() for name in row.fields})
        data[f"{row.prefix}-id"] = row.instance.pk
    change_role(tenant=tenant, membership_id=manager.pk, role=Membership.Role.STAFF)

    answer = staff.post(f"/admin/tenants/tenant/{tenant.pk}/change/", {**data, "name": "Roma 2"})

    assert answer.status_code == 302
    assert Tenant.objects.get(pk=tenant.pk).name == "Roma 2"
    assert Membership.objects.get(pk=manager.pk).role == Membership.Role.STAFF
    assert Membership.objects.get(pk=owner.pk).role == OWNER


def test_a_membership_page_open_before_a_demotion_saved_after_it_keeps_the_demotion(
    staff, restaurant
):
    """The same on the membership's own page, sent back as shown."""
    tenant, _, manager = restaurant
    url = f"/admin/tenants/membership/{manager.pk}/change/"
    form = staff.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    change_role(tenant=tenant, membership_id=manager.pk, role=Membership.Role.STAFF)

    assert staff.post(url, data).status_code == 302
    assert Membership.objects.get(pk=manager.pk).role == Membership.Role.STAFF
