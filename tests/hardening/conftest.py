"""Fixtures of the hardening sweep: two tenants' worlds, snapshots of what a foreign or hostile
request could change, and a production-like live server (DEBUG off) for the HTTP-level checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.http import HttpResponse
from django.test import Client, override_settings

from idempotency.models import IdempotencyRecord
from ordering.models import (
    Coupon,
    Dish,
    Order,
    OrderLine,
    OrderStatus,
    OrderTransition,
    Payment,
)
from ordering.services.lifecycle import apply_transition, transition_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.api_keys import issue_api_key
from tenants.diner_sessions import open_session
from tenants.models import ApiClient, DinerSession, Membership, Tenant
from tests.support.live_server import gunicorn_fixture

PROBLEM_JSON = "application/problem+json"
SIMULATED_PROVIDER_SECRET = "hardening-simulated-provider-secret-not-for-production"

# The live server runs as production does (DEBUG off: no debug pages, Django's error handlers
# answer), with the suite's one Redis node and no write rate limit (schemathesis sends bursts).
PRODUCTION_LIKE_ENV: dict[str, str | None] = {
    "DEBUG": "0",
    "SECRET_KEY": "hardening-sweep-secret-key-not-for-production-use-at-all",
    "IDEMPOTENCY_HASH_KEY": "hardening-sweep-hash-key-not-for-production-use",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback, no TLS proxy in front
    "REDIS_URL": settings.REDIS_URL or "redis://127.0.0.1:6379/0",
    "REDIS_SHARDS": None,
    "REDIS_CLUSTER_URL": None,
    "API_WRITE_RATE_PER_MINUTE": "0",
    "API_TENANT_WRITE_CEILING_PER_MINUTE": "0",
    "SIMULATED_PROVIDER": "1",
    "SIMULATED_PROVIDER_SECRET": SIMULATED_PROVIDER_SECRET,
}

hardening_server = gunicorn_fixture(
    "hardening_server", scope="session", env=PRODUCTION_LIKE_ENV, workers=2
)


def problem_of(response: HttpResponse | Any) -> dict[str, Any]:
    """The problem+json body of an error answer (Django test response or httpx response)."""
    content_type = response.headers.get("Content-Type", "")
    assert content_type == PROBLEM_JSON, (content_type, response.content[:300])
    return json.loads(response.content)


def assert_problem(response: HttpResponse | Any, status: int, code: str) -> dict[str, Any]:
    status_code = getattr(response, "status_code", None)
    assert status_code == status, (status_code, response.content[:500])
    body = problem_of(response)
    assert body["code"] == code, body
    assert body["status"] == status, body
    return body


@dataclass
class World:
    """One tenant with everything a foreign request could aim at: its publishable key (the
    diner app's), its merchant key, and a session per diner signed in by that merchant key."""

    tenant: Tenant
    dish: Dish
    coupon: Coupon
    publishable_key: str
    merchant_key: str
    diner_client: ApiClient
    merchant_client: ApiClient
    orders: dict[str, Order] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    live: bool = False  # sessions for the production-like live server (its own SECRET_KEY)

    def token(self, diner: str = "d1") -> str:
        if diner not in self.tokens:
            secret = PRODUCTION_LIKE_ENV["SECRET_KEY"] if self.live else settings.SECRET_KEY
            with override_settings(SECRET_KEY=secret):
                issued = open_session(client=self.merchant_client, diner_id=diner)
            self.tokens[diner] = issued.token
        return self.tokens[diner]

    def auth(self, kind: str = "diner", *, diner: str = "d1") -> str:
        """The ``Authorization`` value of a ``kind`` credential: "diner" (a session),
        "publishable" or "merchant"."""
        if kind == "diner":
            return f"Bearer {self.token(diner)}"
        return f"Api-Key {self.publishable_key if kind == 'publishable' else self.merchant_key}"

    def headers(self, kind: str = "diner", *, diner: str = "d1") -> dict[str, str]:
        return {"Authorization": self.auth(kind, diner=diner)}


def build_world(slug: str, *, stock: int = 1000, live: bool = False) -> World:
    tenant = Tenant.objects.create(slug=slug, name=slug.title())
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name=f"{slug} secret pizza", price=Decimal("9.50"), stock=stock
    )
    coupon = Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code=f"{slug.upper()}10", kind=Coupon.Kind.PERCENT, value=Decimal("10")
    )
    diner_client, publishable_key = issue_api_key(tenant=tenant, name=f"{slug} app")
    merchant_client, merchant_key = issue_api_key(
        tenant=tenant, name=f"{slug} pos", kind=ApiClient.Kind.MERCHANT
    )
    return World(
        tenant=tenant,
        dish=dish,
        coupon=coupon,
        publishable_key=publishable_key,
        merchant_key=merchant_key,
        diner_client=diner_client,
        merchant_client=merchant_client,
        live=live,
    )


@pytest.fixture
def world_a(db: None) -> World:
    return build_world("alpha")


@pytest.fixture
def world_b(db: None) -> World:
    return build_world("beta")


# Forward path of the lifecycle after PAID; an order in one of these went through each before it.
FORWARD = [OrderStatus.ACCEPTED, OrderStatus.PREPARING, OrderStatus.READY, OrderStatus.DELIVERING]
ORDER_DINER = "diner-1"  # the diner make_order places orders for


def make_order(tenant: Tenant, dish: Dish, status: str) -> Order:
    """An order of one ``dish`` brought to ``status`` through the services, the provider's
    "paid" callback standing in as one direct FSM move."""
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=1)],
        payment_method="card",
        diner_id=ORDER_DINER,
        actor="test",
    )
    if status == OrderStatus.CREATED:
        return order
    pay_order(tenant=tenant, order_id=order.pk, actor="test")
    if status != OrderStatus.PAYING:
        with transaction.atomic():
            paying = Order.all_tenants.get(pk=order.pk)
            apply_transition(paying, paying.mark_paid, actor="provider:test")
        targets = FORWARD[: FORWARD.index(status) + 1] if status in FORWARD else []
        for target in targets:
            transition_order(tenant=tenant, order_id=order.pk, target=target, actor="test")
    return Order.all_tenants.get(pk=order.pk)


def form_token(html: str) -> str:
    """The one-time idempotency token of the first form on a dashboard page."""
    match = re.search(r'name="idempotency_key" value="([^"]+)"', html)
    assert match, "the page has no form with an idempotency token"
    return match.group(1)


def owner_of(world: World, username: str) -> Client:
    """A browser logged in to the dashboard as an owner of ``world``'s tenant."""
    user = User.objects.create_user(username)  # unusable password: force_login only
    Membership.objects.create(user=user, tenant=world.tenant, role=Membership.Role.OWNER)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def snapshot(tenant: Tenant) -> dict[str, Any]:
    """Every row of ``tenant`` a foreign or hostile request could create, change or delete."""
    tenant_key = str(tenant.pk)
    return {
        "orders": sorted(
            Order.all_tenants.filter(tenant=tenant).values_list(
                "pk", "status", "total", "note", "coupon_id", "updated_at"
            )
        ),
        "lines": OrderLine.all_tenants.filter(tenant=tenant).count(),
        "transitions": OrderTransition.all_tenants.filter(tenant=tenant).count(),
        "payments": sorted(
            Payment.all_tenants.filter(tenant=tenant).values_list(
                "pk", "status", "amount", "provider_txn_id", "updated_at"
            )
        ),
        "dishes": sorted(
            Dish.all_tenants.filter(tenant=tenant).values_list("pk", "price", "stock", "active")
        ),
        "coupons": sorted(
            Coupon.all_tenants.filter(tenant=tenant).values_list(
                "pk", "active", "used_count", "valid_until"
            )
        ),
        "memberships": sorted(
            Membership.objects.filter(tenant=tenant).values_list("pk", "user_id", "role")
        ),
        "api_clients": sorted(
            ApiClient.objects.filter(tenant=tenant).values_list("pk", "revoked_at")
        ),
        "diner_sessions": sorted(
            DinerSession.objects.filter(tenant=tenant).values_list(
                "pk", "diner_id", "revoked_at", "expires_at"
            )
        ),
        "idempotency_records": sorted(
            IdempotencyRecord.objects.filter(tenant_key=tenant_key).values_list(
                "pk", "key", "response_status", "expires_at"
            )
        ),
    }


def business_rows() -> dict[str, int]:
    """Row counts of the tables an order write touches, across all tenants."""
    return {
        "orders": Order.all_tenants.count(),
        "lines": OrderLine.all_tenants.count(),
        "transitions": OrderTransition.all_tenants.count(),
        "payments": Payment.all_tenants.count(),
        "stock": sum(Dish.all_tenants.values_list("stock", flat=True)),
        "coupon_uses": sum(Coupon.all_tenants.values_list("used_count", flat=True)),
    }


def order_table_exists() -> bool:
    return "ordering_order" in connection.introspection.table_names()


@pytest.fixture
def nothing_written(world_a: World) -> Callable[[], None]:
    """Call the returned function at the end of a test: no business row changed since the
    fixture was set up (after ``world_a``): stock, coupon uses and every order table."""
    before = business_rows()

    def check() -> None:
        assert order_table_exists()
        assert business_rows() == before

    return check
