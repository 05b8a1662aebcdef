"""Fixtures of the dashboard tests: merchants, orders in any status, a second tenant's world."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ordering.models import Coupon, Dish, Order, OrderStatus
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.conftest import menu_for
from tests.dashboard.factories import form_token, make_merchant, make_order

__all__ = ["World", "build_world", "form_token", "make_merchant", "make_order"]
S = OrderStatus


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: object) -> None:
    """PBKDF2's deliberate slowness costs ~0.4 s per user; these tests are not about it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@dataclass
class World:
    """One tenant's data, as a merchant of it sees it."""

    tenant: Tenant
    user: User
    dishes: dict[str, Dish]
    coupon: Coupon
    api_client: ApiClient
    order: Order


def build_world(tenant: Tenant, username: str) -> World:
    dishes = menu_for(tenant)
    coupon = Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code=f"C-{username}".upper(), kind=Coupon.Kind.AMOUNT, value=2
    )
    api_client, _ = issue_api_key(tenant=tenant, name=f"{username} app")
    return World(
        tenant=tenant,
        user=make_merchant(tenant, username),
        dishes=dishes,
        coupon=coupon,
        api_client=api_client,
        order=make_order(tenant, dishes["pizza"], S.PAID),
    )


@pytest.fixture
def mine(tenant: Tenant) -> World:
    return build_world(tenant, "alice")


@pytest.fixture
def theirs(other_tenant: Tenant) -> World:
    return build_world(other_tenant, "bob")


@pytest.fixture
def merchant(mine: World) -> Client:
    """A browser-like client logged in as a member of ``mine`` only."""
    client = Client()
    client.force_login(mine.user)
    return client


@pytest.fixture
def order_in() -> Callable[..., Order]:
    return make_order
