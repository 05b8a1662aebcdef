"""A password someone else set is temporary (``tenants/temporary_passwords.py``): platform staff
who create an account or give it a new password in the admin, and the operator who sets a new
owner's with ``changepassword`` after ``onboard_tenant``, know it. While it stands it opens only
the page where its holder chooses their own, which must differ from it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from tenants.models import ApiClient, Membership, PasswordToReplace, Tenant

pytestmark = pytest.mark.django_db

GIVEN = "given-by-staff-4821"
OWN = "chosen-by-me-9374"


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="trattoria", name="Trattoria")


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-pass-12345"))
    return client


def signed_in(username: str, password: str) -> Client:
    client = Client()
    answer = client.post("/dashboard/login/", {"username": username, "password": password})
    assert answer.status_code == 302, answer.content.decode()[-400:]
    return client


def choose(client: Client, old: str, new: str, **extra: str) -> object:
    return client.post(
        "/dashboard/password/",
        {"old_password": old, "new_password1": new, "new_password2": new, **extra},
    )


def to_replace(username: str) -> bool:
    return PasswordToReplace.objects.filter(user__username=username).exists()


def test_an_account_staff_made_with_a_password_opens_only_the_page_to_choose_one(root, tenant):
    made = root.post(
        "/admin/auth/user/add/",
        {"username": "marco", "usable_password": "true", "password1": GIVEN, "password2": GIVEN},
    )
    assert made.status_code == 302 and to_replace("marco")
    marco = User.objects.get(username="marco")
    Membership.objects.create(tenant=tenant, user=marco, role=Membership.Role.OWNER)

    client = signed_in("marco", GIVEN)
    board = client.get("/dashboard/?status=new")
    assert (board.status_code, board["Location"]) == (
        302,
        "/dashboard/password/?next=%2Fdashboard%2F%3Fstatus%3Dnew",
    )
    # a form's POST does nothing: no key issued
    issued = client.post("/dashboard/api-keys/", {"name": "till", "kind": "merchant"})
    assert (issued.status_code, issued["Location"]) == (303, "/dashboard/password/")
    assert not ApiClient.objects.filter(tenant=tenant).exists()

    page = client.get("/dashboard/password/?next=/dashboard/")
    assert page.status_code == 200
    assert "Your password was set by someone else" in page.content.decode()

    kept = choose(client, GIVEN, GIVEN)
    assert kept.status_code == 200 and "other than your current one" in kept.content.decode()
    assert to_replace("marco")

    chosen = choose(client, GIVEN, OWN, next="/dashboard/?status=new")
    assert (chosen.status_code, chosen["Location"]) == (302, "/dashboard/?status=new")
    assert not to_replace("marco")
    assert client.get("/dashboard/api-keys/").status_code == 200  # still signed in
    marco.refresh_from_db()
    assert marco.check_password(OWN) and not marco.check_password(GIVEN)


def test_a_password_staff_give_someone_else_is_temporary_their_own_is_not(root, tenant):
    anna = User.objects.create_user("anna", password="anna-own-pass-1")
    Membership.objects.create(tenant=tenant, user=anna, role=Membership.Role.STAFF)
    assert not to_replace("anna")  # a password set in code (the demo's, a test's) is the holder's

    given = root.post(
        f"/admin/auth/user/{anna.pk}/password/",
        {"usable_password": "true", "password1": GIVEN, "password2": GIVEN},
    )
    assert given.status_code == 302 and to_replace("anna")
    assert signed_in("anna", GIVEN).get("/dashboard/").status_code == 302

    # the superuser sets their own on the same page: theirs
    me = User.objects.get(username="root")
    own = root.post(
        f"/admin/auth/user/{me.pk}/password/",
        {"usable_password": "true", "password1": OWN, "password2": OWN},
    )
    assert own.status_code == 302 and not to_replace("root")

    # password sign-in turned off: no password anyone knows
    # the admin's "conflicting form data" (turned off, but the button to set one): not saved
    carl = User.objects.create_user("carl", password="carl-own-pass-1")
    conflicting = root.post(f"/admin/auth/user/{carl.pk}/password/", {"usable_password": "false"})
    assert conflicting.status_code == 302 and not to_replace("carl")
    assert User.objects.get(username="carl").check_password("carl-own-pass-1")
    off = root.post(
        f"/admin/auth/user/{anna.pk}/password/",
        {"usable_password": "false", "unset-password": "1"},
    )
    assert off.status_code == 302 and not to_replace("anna")
    unusable = root.post(
        "/admin/auth/user/add/", {"username": "nopass", "usable_password": "false"}
    )
    assert unusable.status_code == 302 and not to_replace("nopass")


def test_a_staff_account_is_sent_from_the_admin_and_back_once_it_chose(root):
    root.post(
        "/admin/auth/user/add/",
        {"username": "sam", "usable_password": "true", "password1": GIVEN, "password2": GIVEN},
    )
    User.objects.filter(username="sam").update(is_staff=True)
    sam = Client()
    assert sam.post("/admin/login/", {"username": "sam", "password": GIVEN}).status_code == 302
    sent = sam.get("/admin/")
    assert sent["Location"] == "/dashboard/password/?next=%2Fadmin%2F"
    back = choose(sam, GIVEN, OWN, next="/admin/")
    assert back["Location"] == "/admin/"
    assert sam.get("/admin/").status_code == 200


def test_signing_out_is_open_while_the_password_is_to_be_replaced(root, tenant):
    User.objects.create_user("lea", password=GIVEN)
    PasswordToReplace.objects.create(user=User.objects.get(username="lea"))
    client = signed_in("lea", GIVEN)
    out = client.post("/dashboard/logout/")
    assert (out.status_code, out["Location"]) == (302, "/dashboard/login/")
    assert client.get("/dashboard/password/")["Location"].startswith("/dashboard/login/")


def test_the_same_choice_sent_twice_is_done_once_not_an_error():
    """A double click or a retry: the second's current password is the one just replaced."""
    User.objects.create_user("ivo", password=GIVEN)
    PasswordToReplace.objects.create(user=User.objects.get(username="ivo"))
    client = signed_in("ivo", GIVEN)
    first = choose(client, GIVEN, OWN, next="/dashboard/menu/")
    second = choose(client, GIVEN, OWN, next="/dashboard/menu/")
    assert first["Location"] == second["Location"] == "/dashboard/menu/"
    assert "Your password is already changed." in [
        str(m)
        for m in second.wsgi_request._messages  # type: ignore[attr-defined]
    ]
    wrong = choose(client, "not-it-at-all-1", "another-one-4455")
    assert wrong.status_code == 200  # a wrong current password is still the form's error
    assert User.objects.get(username="ivo").check_password(OWN)


def test_a_next_page_of_another_site_is_not_followed():
    User.objects.create_user("eve", password="eve-own-pass-123")
    client = signed_in("eve", "eve-own-pass-123")
    away = choose(client, "eve-own-pass-123", OWN, next="https://elsewhere.example/")
    assert away["Location"] == "/dashboard/"


def test_a_new_owner_onboarded_chooses_their_own_after_the_operator_sets_one():
    out = StringIO()
    call_command("onboard_tenant", "osteria", "--name=Osteria", "--owner=bruno", stdout=out)
    assert "they choose their own when they first sign in" in out.getvalue()
    bruno = User.objects.get(username="bruno")
    bruno.set_password(GIVEN)  # manage.py changepassword bruno
    bruno.save()
    client = signed_in("bruno", GIVEN)
    assert client.get("/dashboard/members/").status_code == 302
    choose(client, GIVEN, OWN)
    assert client.get("/dashboard/members/").status_code == 200

    # an existing account made owner keeps the password it has
    call_command("onboard_tenant", "enoteca", "--name=Enoteca", "--owner=bruno", stdout=out)
    assert not to_replace("bruno")
