"""Tenant scoping, API keys and dashboard tenant resolution."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ordering.models import Dish, Order
from tenants.api_keys import authenticate_api_key, issue_api_key, revoke_api_key
from tenants.models import Membership
from tenants.routing import LOGICAL_SHARDS, tenant_shard
from tenants.scoping import UnscopedQueryError

pytestmark = pytest.mark.django_db


def test_unscoped_queries_fail_loudly(tenant):
    with pytest.raises(UnscopedQueryError):
        Order.objects.filter(status="CREATED")
    with pytest.raises(UnscopedQueryError):
        Dish.objects.all()
    with pytest.raises(UnscopedQueryError):
        Dish.objects.for_tenant(None)
    assert Dish.objects.for_tenant(tenant).count() == 0


def test_rows_read_for_a_tenant_carry_that_tenant_without_a_query(tenant, other_tenant, menu):
    # given dishes of two tenants
    Dish.objects.for_tenant(other_tenant).create(tenant=other_tenant, name="Theirs", price=1)
    # when this tenant's dishes are read, through a query refined after the scoping too
    with CaptureQueriesContext(connection) as queries:
        dishes = list(Dish.objects.for_tenant(tenant).filter(active=True).order_by("name"))
        tenants = [dish.tenant for dish in dishes]
    # then each one's tenant is the instance the caller named, and only the dishes were read
    assert [d.name for d in dishes] == ["Pasta", "Pizza"]
    assert all(t is tenant for t in tenants)
    assert len(queries.captured_queries) == 1
    # and a tenant named by its id still scopes the query; its rows read the tenant as usual
    [by_id] = Dish.objects.for_tenant(other_tenant.pk)
    assert by_id.tenant == other_tenant


def test_api_key_is_stored_hashed_shown_once_and_revocable(tenant):
    client, key = issue_api_key(tenant=tenant, name="app")
    prefix, secret = key.split(".", 1)
    assert client.prefix == prefix and secret not in client.secret_hash and len(secret) >= 40
    assert authenticate_api_key(key) == client
    client.refresh_from_db()
    assert client.last_used_at is not None
    assert authenticate_api_key(prefix + ".wrong") is None
    revoke_api_key(client=client)
    assert authenticate_api_key(key) is None


def test_revoked_key_gets_401(client, tenant):
    api_client, key = issue_api_key(tenant=tenant, name="app")
    revoke_api_key(client=api_client)
    r = client.get("/api/v1/menu/", HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert r.status_code == 401 and r.json()["code"] == "API_KEY_INVALID"


def test_tenant_shard_is_stable_and_spread():
    shards = [tenant_shard(i) for i in range(1, 1601)]
    assert shards == [tenant_shard(i) for i in range(1, 1601)]
    counts = [shards.count(s) for s in range(LOGICAL_SHARDS)]
    assert min(counts) > 60 and max(counts) < 140


def test_dashboard_user_of_two_tenants_can_switch(client, tenant, other_tenant):
    user = User.objects.create_user("multi", password="pw-123456")
    Membership.objects.create(user=user, tenant=tenant, role="owner")
    Membership.objects.create(user=user, tenant=other_tenant, role="staff")
    client.force_login(user)
    board = client.get("/dashboard/")
    assert board.status_code == 200 and board.context["request"].membership.tenant == tenant
    client.post("/dashboard/switch-tenant/", {"tenant_id": other_tenant.pk})
    assert client.get("/dashboard/").context["request"].membership.tenant == other_tenant


def test_dashboard_refuses_switch_to_foreign_tenant(client, tenant, make_tenant):
    user = User.objects.create_user("solo", password="pw-123456")
    Membership.objects.create(user=user, tenant=tenant)
    foreign = make_tenant("foreign")
    client.force_login(user)
    client.post("/dashboard/switch-tenant/", {"tenant_id": foreign.pk})
    assert client.get("/dashboard/").context["request"].membership.tenant == tenant


def test_dashboard_without_membership_is_403(client):
    client.force_login(User.objects.create_user("nobody", password="pw-123456"))
    assert client.get("/dashboard/").status_code == 403
