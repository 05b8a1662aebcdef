"""``manage.py onboard_tenant``: a restaurant opened in production is a tenant with an owner who
can sign in, and keys that work, or nothing at all."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from rest_framework.test import APIClient

from tenants.models import ApiClient, Membership, Tenant

pytestmark = pytest.mark.django_db


def onboard(*args: str) -> str:
    out = StringIO()
    call_command("onboard_tenant", *args, stdout=out)
    return out.getvalue()


def test_a_new_restaurant_gets_its_owner_and_keys_that_work():
    out = json.loads(
        onboard(
            "trattoria",
            "--name=Trattoria Roma",
            "--owner=anna",
            "--email=anna@example.com",
            "--time-zone=Europe/Rome",
            "--issue-keys",
            "--json",
        )
    )
    tenant = Tenant.objects.get(slug="trattoria")
    assert (tenant.name, tenant.time_zone, tenant.is_active) == (
        "Trattoria Roma",
        "Europe/Rome",
        True,
    )
    assert out["tenant_id"] == tenant.pk and out["owner_created"] is True
    anna = User.objects.get(username="anna")
    assert anna.email == "anna@example.com" and not anna.has_usable_password()
    assert Membership.objects.get(tenant=tenant).user == anna
    assert Membership.objects.get(tenant=tenant).role == Membership.Role.OWNER

    # the secret key reads the restaurant's orders; the publishable key opens a guest session
    merchant = APIClient()
    merchant.credentials(HTTP_AUTHORIZATION=f"Api-Key {out['merchant_api_key']}")
    assert merchant.get("/api/v1/orders/").status_code == 200
    guest = APIClient()
    guest.credentials(HTTP_AUTHORIZATION=f"Api-Key {out['publishable_key']}")
    assert guest.post("/api/v1/diner-sessions/", format="json").status_code == 201
    assert guest.get("/api/v1/orders/").status_code == 403  # a public key reads no orders
    kinds = sorted(ApiClient.objects.filter(tenant=tenant).values_list("kind", flat=True))
    assert kinds == ["merchant", "publishable"]

    # once a password is set (manage.py changepassword), she signs in, chooses her own and
    # runs the restaurant's dashboard
    anna.set_password("a-long-pass-phrase-1")
    anna.save()
    owner = Client()
    signed_in = owner.post(
        "/dashboard/login/", {"username": "anna", "password": "a-long-pass-phrase-1"}
    )
    assert signed_in.status_code == 302
    owner.post(
        "/dashboard/password/",
        {
            "old_password": "a-long-pass-phrase-1",
            "new_password1": "her-own-pass-phrase-2",
            "new_password2": "her-own-pass-phrase-2",
        },
    )
    assert owner.get("/dashboard/api-keys/").status_code == 200


def test_the_printout_says_how_to_set_the_password_and_shows_each_key_once():
    out = onboard("osteria", "--name=Osteria", "--owner=bruno", "--issue-keys")
    assert "Set their password: manage.py changepassword bruno" in out
    lines = {line.split(" (shown this once): ")[0]: line for line in out.splitlines()}
    assert {"Publishable key", "Secret key"} <= lines.keys()
    assert ApiClient.objects.filter(tenant__slug="osteria").count() == 2


def test_an_existing_user_becomes_owner_with_their_password_kept():
    carla = User.objects.create_user("carla", password="her-own-pass-phrase-7")
    out = json.loads(onboard("pizzeria", "--name=Pizzeria", "--owner=carla", "--json"))
    assert out["owner_created"] is False and out["publishable_key"] is None
    carla.refresh_from_db()
    assert carla.check_password("her-own-pass-phrase-7")
    assert Membership.objects.get(tenant__slug="pizzeria", user=carla).role == "owner"
    assert not ApiClient.objects.exists()


def everything() -> tuple[int, int, int, int]:
    return (
        Tenant.objects.count(),
        User.objects.count(),
        Membership.objects.count(),
        ApiClient.objects.count(),
    )


def test_running_it_again_for_the_slug_changes_nothing():
    onboard("trattoria", "--name=Trattoria", "--owner=anna", "--issue-keys")
    before = everything()
    with pytest.raises(CommandError, match="Tenant with this Slug already exists"):
        onboard("trattoria", "--name=Another", "--owner=dario", "--issue-keys")
    assert everything() == before
    assert Tenant.objects.get(slug="trattoria").name == "Trattoria"
    assert not User.objects.filter(username="dario").exists()
    with pytest.raises(CommandError, match="slug, in other letter case, exists"):
        onboard("Trattoria", "--name=Another", "--owner=dario")
    with pytest.raises(CommandError, match=r"'anna' exists \(usernames differ only in case\)"):
        onboard("osteria", "--name=Osteria", "--owner=ANNA")
    assert everything() == before


def test_the_database_refuses_slugs_that_differ_only_in_case_whoever_writes_them():
    """Two onboardings at once both pass any check made before writing (red: both rows)."""
    Tenant.objects.create(slug="lock-twin", name="R")
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.create(slug="Lock-Twin", name="R")
    assert Tenant.objects.filter(slug__iexact="lock-twin").count() == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["bad slug", "--name=X", "--owner=anna"], "tenant slug"),
        (["x" * 65, "--name=X", "--owner=anna"], "tenant slug"),
        (["ok", "--name=", "--owner=anna"], "tenant name"),
        (["ok", "--name=X", "--owner=anna", "--time-zone=Mars/Olympus"], "tenant time_zone"),
        # the host's own zone (/etc/localtime), not one zone: each server its own business day
        (["ok", "--name=X", "--owner=anna", "--time-zone=localtime"], "tenant time_zone"),
        (["ok", "--name=X", "--owner=a b"], "owner username"),
        (["ok", "--name=X", "--owner=anna", "--email=not-an-address"], "owner email"),
    ],
)
def test_bad_input_is_refused_with_nothing_created(args, says):
    with pytest.raises(CommandError, match=f"nothing was created; .*{says}"):
        onboard(*args, "--issue-keys")
    assert everything() == (0, 0, 0, 0)
