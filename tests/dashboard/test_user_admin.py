"""Accounts in the Django admin: platform staff who create and look after the restaurants'
accounts (docs/tenancy.md: "further accounts are created by platform staff") need "change
user", and with Django's own user admin that let them grant themselves superuser status, any
permission or group, or set the password of a superuser's account and sign in as them:
every permission the admin splits (cancelling orders, seeing what diners wrote, erasing
diners, the Lua scripts) was theirs for one form. Only superusers grant and take away staff
and superuser status, groups and permissions, or change a platform staff account."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "x-123456789"


def staff_with(*codenames: str, username: str = "support") -> tuple[User, Client]:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return user, client


def change_form(user: User, **changes: object) -> dict[str, object]:
    """The user's change form as the admin shows it (every field it sends), with ``changes``."""
    data: dict[str, object] = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "_save": "Save",
    }
    data.update(changes)
    return data


@pytest.fixture
def cancel_permission() -> Permission:
    return Permission.objects.get(codename="cancel_order")


def test_staff_who_change_accounts_cannot_grant_themselves_anything(cancel_permission):
    support, client = staff_with("view_user", "change_user")
    everything = Group.objects.create(name="everything")
    everything.permissions.add(cancel_permission)

    answer = client.post(
        f"/admin/auth/user/{support.pk}/change/",
        change_form(
            support,
            is_staff="on",
            is_superuser="on",
            groups=[everything.pk],
            user_permissions=[cancel_permission.pk],
            email="support@example.com",
        ),
    )

    assert answer.status_code == 302
    support.refresh_from_db()
    assert support.email == "support@example.com"  # what they may change is changed
    assert not support.is_superuser
    assert list(support.groups.all()) == []
    assert not support.has_perm("ordering.cancel_order")


def test_staff_who_change_accounts_cannot_make_a_restaurant_account_staff(cancel_permission):
    _, client = staff_with("view_user", "change_user")
    merchant = User.objects.create_user("anna", password=PASSWORD)

    client.post(
        f"/admin/auth/user/{merchant.pk}/change/",
        change_form(
            merchant, is_staff="on", is_superuser="on", user_permissions=[cancel_permission.pk]
        ),
    )

    merchant.refresh_from_db()
    assert not merchant.is_staff and not merchant.is_superuser
    assert not merchant.user_permissions.exists()


def test_staff_who_change_accounts_cannot_touch_a_superuser_or_another_staff_account():
    _, client = staff_with("view_user", "change_user", "delete_user")
    root = User.objects.create_superuser("root", password=PASSWORD)
    colleague, _ = staff_with("cancel_order", username="colleague")

    for account in (root, colleague):
        password = client.post(
            f"/admin/auth/user/{account.pk}/password/",
            {"password1": "taken-over-123", "password2": "taken-over-123"},
        )
        edit = client.post(
            f"/admin/auth/user/{account.pk}/change/", change_form(account, is_active="")
        )
        delete = client.post(f"/admin/auth/user/{account.pk}/delete/", {"post": "yes"})
        assert (password.status_code, edit.status_code, delete.status_code) == (403, 403, 403)
        account.refresh_from_db()
        assert account.check_password(PASSWORD) and account.is_active


def test_staff_who_change_accounts_still_look_after_the_restaurants_accounts():
    _, client = staff_with("view_user", "change_user")
    merchant = User.objects.create_user("anna", password=PASSWORD)

    password = client.post(
        f"/admin/auth/user/{merchant.pk}/password/",
        {"password1": "a-new-one-123", "password2": "a-new-one-123"},
    )
    edit = client.post(
        f"/admin/auth/user/{merchant.pk}/change/", change_form(merchant, email="anna@example.com")
    )

    assert (password.status_code, edit.status_code) == (302, 302)
    merchant.refresh_from_db()
    assert merchant.check_password("a-new-one-123") and merchant.email == "anna@example.com"


def test_staff_who_change_accounts_set_a_member_s_password_only_holding_what_its_role_does():
    """Setting the password of a restaurant's owner and signing in as them opened that
    restaurant's dashboard (what diners wrote, cancelling and refunding orders, erasing
    diners) to staff the admin keeps from all of it (red: the password was set). A member's
    password is set by staff who hold in the admin what the member's strongest role holds."""
    from tenants.models import Membership, Tenant

    tenant = Tenant.objects.create(slug="roma", name="Roma")
    owner = User.objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(tenant=tenant, user=owner, role=Membership.Role.OWNER)
    new = {"password1": "a-new-one-123", "password2": "a-new-one-123"}

    _, client = staff_with("view_user", "change_user", "view_diner_details", "cancel_order")
    assert client.post(f"/admin/auth/user/{owner.pk}/password/", new).status_code == 403
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)

    _, client = staff_with(
        "view_user", "change_user", "view_diner_details", "cancel_order", "add_dinererasure",
        username="senior",
    )  # fmt: skip
    assert client.post(f"/admin/auth/user/{owner.pk}/password/", new).status_code == 302
    owner.refresh_from_db()
    assert owner.check_password("a-new-one-123")


@pytest.mark.parametrize("weak", ["password", "12345678", "qwertyuiop", "iloveyou"])
def test_a_password_anyone_would_guess_first_is_refused(weak):
    """Only a length of 8 was asked: "password" and "12345678" were taken for a restaurant's
    owner (and by ``changepassword`` and ``createsuperuser``, for platform staff, who see
    every restaurant), guessed within the login lockout's five tries from each address."""
    _, client = staff_with("view_user", "change_user")
    merchant = User.objects.create_user("anna", password=PASSWORD)

    answer = client.post(
        f"/admin/auth/user/{merchant.pk}/password/", {"password1": weak, "password2": weak}
    )

    assert answer.status_code == 200  # the form again, with why
    merchant.refresh_from_db()
    assert merchant.check_password(PASSWORD)


def test_staff_who_change_groups_cannot_add_permissions_to_them(cancel_permission):
    support, client = staff_with("view_group", "change_group")
    theirs = Group.objects.create(name="support")
    support.groups.add(theirs)

    client.post(
        f"/admin/auth/group/{theirs.pk}/change/",
        {"name": "support", "permissions": [cancel_permission.pk], "_save": "Save"},
    )

    assert not theirs.permissions.exists()
    assert not User.objects.get(pk=support.pk).has_perm("ordering.cancel_order")


def test_a_superuser_still_grants(cancel_permission):
    root = User.objects.create_superuser("root", password=PASSWORD)
    client = Client()
    client.force_login(root)
    merchant = User.objects.create_user("bruno", password=PASSWORD)

    answer = client.post(
        f"/admin/auth/user/{merchant.pk}/change/",
        change_form(merchant, is_staff="on", user_permissions=[cancel_permission.pk]),
    )

    assert answer.status_code == 302
    merchant.refresh_from_db()
    assert merchant.is_staff and merchant.has_perm("ordering.cancel_order")


def test_an_account_page_open_before_its_deactivation_saved_after_leaves_it_inactive():
    """Red before: the page sent back the "active" box as it had shown it, and the form wrote
    it: staff correcting an e-mail address in a tab opened before a colleague deactivated the
    account (its password leaked) made it active again, and it signed in."""
    _, client = staff_with("view_user", "change_user")
    merchant = User.objects.create_user("anna", password=PASSWORD)
    url = f"/admin/auth/user/{merchant.pk}/change/"
    form = client.get(url).context["adminform"].form
    shown = {name: form[name].value() for name in form.fields if name.endswith("_shown")}
    User.objects.filter(pk=merchant.pk).update(is_active=False)  # a colleague, meanwhile

    edit = client.post(url, change_form(merchant, email="anna@example.com", **shown))

    assert edit.status_code == 302
    merchant.refresh_from_db()
    assert merchant.email == "anna@example.com" and not merchant.is_active
    login = Client().post("/dashboard/login/", {"username": "anna", "password": PASSWORD})
    assert login.status_code == 200 and "_auth_user_id" not in login.client.session


def test_staff_still_deactivate_and_reactivate_an_account_on_its_page():
    _, client = staff_with("view_user", "change_user")
    merchant = User.objects.create_user("anna", password=PASSWORD)
    url = f"/admin/auth/user/{merchant.pk}/change/"
    for active in (False, True):
        form = client.get(url).context["adminform"].form
        shown = {name: form[name].value() for name in form.fields if name.endswith("_shown")}
        sent = change_form(merchant, **shown)
        if not active:
            del sent["is_active"]  # an unticked box is not sent
        assert client.post(url, sent).status_code == 302
        merchant.refresh_from_db()
        assert merchant.is_active is active
