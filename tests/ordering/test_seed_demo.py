"""``manage.py seed_demo``: the demo data, machine-readable, and safe to run twice."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from ordering.models import Coupon, Dish
from tenants.models import ApiClient, Membership, Tenant

pytestmark = pytest.mark.django_db


def seed() -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_seed_demo_json_and_rerun_creates_nothing_new(client):
    first = seed()
    counts = (
        Tenant.objects.count(),
        Dish.all_tenants.count(),
        Coupon.all_tenants.count(),
        Membership.objects.count(),
    )
    second = seed()
    assert counts == (2, 6, 2, 2)
    assert (
        Tenant.objects.count(),
        Dish.all_tenants.count(),
        Coupon.all_tenants.count(),
        Membership.objects.count(),
    ) == counts
    assert [t["dish_ids"] for t in first["tenants"]] == [t["dish_ids"] for t in second["tenants"]]
    # fresh keys each run; the old ones are revoked, the new ones work
    for old, new in zip(first["tenants"], second["tenants"], strict=True):
        assert set(new) >= {"slug", "api_key", "dish_ids", "owner_username", "owner_password"}
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Api-Key {old['api_key']}")
        assert api.get("/api/v1/menu/").status_code == 401
        api.credentials(HTTP_AUTHORIZATION=f"Api-Key {new['api_key']}")
        assert {d["id"] for d in api.get("/api/v1/menu/").json()} == set(new["dish_ids"])
        login = {"username": new["owner_username"], "password": new["owner_password"]}
        assert client.post("/dashboard/login/", login).status_code == 302
    assert ApiClient.objects.filter(revoked_at__isnull=True).count() == 4
