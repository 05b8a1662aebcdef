"""Tenant isolation, swept over every endpoint the URL resolver knows.

Tenant B's credentials (publishable key, diner session, merchant key, dashboard owner) are
pointed at tenant A's ids. Whatever the endpoint, the answer is "forbidden" where the
credential's capabilities do not reach it (``tenants.permissions``), and otherwise exactly the
answer for an id that does not exist; none of A's rows change: orders, lines, transitions,
payments, dishes, coupons, API keys, diner sessions, members and idempotency records are
compared before and after. Endpoints are enumerated from the resolver, so a new endpoint is
swept the day it is added; one with a path parameter the sweep cannot fill fails loudly.

Idempotency keys are scoped by tenant: A's key sent by B is B's own operation, never a replay
of A's answer.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from ordering.dashboard import urls as dashboard_urls
from ordering.models import Order, OrderStatus
from tenants.models import Membership
from tenants.permissions import declared_capabilities, kinds_holding
from tenants.principals import CredentialKind
from tests.hardening.conftest import (
    ORDER_DINER,
    World,
    assert_problem,
    form_token,
    make_order,
    owner_of,
    problem_of,
    snapshot,
)

pytestmark = pytest.mark.django_db

API_PREFIX = "/api/v1/"
NONEXISTENT_ID = 2**62 + 12345
NONEXISTENT_DINER = "nobody-at-all"
# What each path parameter names (A's rows to aim at; see foreign_ids).
FOREIGN_IDS: dict[str, str] = {
    "order_id": "orders",
    "dish_id": "dish",
    "coupon_id": "coupon",
    "client_id": "diner_client",
    "diner_id": "the diner of A's orders",
    "membership_id": "a member of A",
}
KINDS = {
    "publishable": CredentialKind.PUBLISHABLE,
    "diner": CredentialKind.DINER_SESSION,
    "merchant": CredentialKind.MERCHANT,
}


@dataclass(frozen=True)
class Endpoint:
    route: str  # e.g. "api/v1/orders/<int:order_id>/pay/"
    view: Any
    kwargs: tuple[str, ...]

    @property
    def view_class(self) -> type[APIView] | None:
        return getattr(self.view, "cls", None)

    def methods(self) -> list[str]:
        cls = self.view_class
        if cls is None:
            return ["GET", "POST"]
        return [
            m.upper()
            for m in cls.http_method_names
            if m not in {"options", "head"} and hasattr(cls, m)
        ]

    def allows(self, kind: str, method: str) -> bool:
        """Do the capabilities of a ``kind`` credential reach this endpoint's ``method``?"""
        needed = declared_capabilities(self.view_class, method)
        return KINDS[kind] in kinds_holding(needed)

    def path(self, **ids: int | str) -> str:
        path = "/" + self.route
        for name in self.kwargs:
            path = re.sub(rf"<\w+:{name}>", str(ids[name]), path)
        assert "<" not in path, f"{self.route}: unsupported path parameter"
        return path


def walk(patterns: list[Any], prefix: str = "") -> Iterator[Endpoint]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            converters = getattr(entry.pattern, "converters", {})
            yield Endpoint(
                route=prefix + str(entry.pattern), view=entry.callback, kwargs=tuple(converters)
            )


def api_endpoints() -> list[Endpoint]:
    return [e for e in walk(get_resolver().url_patterns) if ("/" + e.route).startswith(API_PREFIX)]


def dashboard_pages_with_ids() -> list[Endpoint]:
    return [e for e in walk(dashboard_urls.urlpatterns) if e.kwargs]


def dashboard_pages_without_ids() -> list[Endpoint]:
    return [
        e
        for e in walk(dashboard_urls.urlpatterns)
        if not e.kwargs and e.route.startswith("dashboard/") and "log" not in e.route
    ]


API_CASES = [
    pytest.param(e, method, id=f"{method} /{e.route}")
    for e in api_endpoints()
    for method in e.methods()
]


def test_the_sweep_finds_the_api_and_dashboard() -> None:
    routes = {e.route for e in api_endpoints()}
    assert {"api/v1/orders/", "api/v1/orders/<int:order_id>/pay/"} <= routes
    assert {"dashboard/orders/<int:order_id>/", "dashboard/menu/<int:dish_id>/"} <= {
        e.route for e in dashboard_pages_with_ids()
    }
    unmapped = {
        name
        for e in [*api_endpoints(), *dashboard_pages_with_ids()]
        for name in e.kwargs
        if name not in FOREIGN_IDS
    }
    assert not unmapped, f"map these path parameters to tenant A's rows in FOREIGN_IDS: {unmapped}"


@pytest.fixture
def a_with_orders(world_a: World) -> World:
    """A with an order in every status a foreign pay / cancel / move could still act on, a
    live session of the diner of those orders, and a member."""
    for status in (OrderStatus.CREATED, OrderStatus.PAYING, OrderStatus.PAID, OrderStatus.READY):
        world_a.orders[status] = make_order(world_a.tenant, world_a.dish, status)
    world_a.token(ORDER_DINER)
    Membership.objects.create(
        user=User.objects.create_user("a-member"), tenant=world_a.tenant, role="staff"
    )
    return world_a


def foreign_ids(world: World) -> list[dict[str, int | str]]:
    """Every combination of A's ids to put into a path (one per A order)."""
    member = Membership.objects.filter(tenant=world.tenant).order_by("pk").first()
    return [
        {
            "order_id": order.pk,
            "dish_id": world.dish.pk,
            "coupon_id": world.coupon.pk,
            "client_id": world.diner_client.pk,
            "diner_id": ORDER_DINER,
            "membership_id": member.pk if member else NONEXISTENT_ID,
        }
        for order in world.orders.values()
    ]


def nonexistent(ids: dict[str, int | str]) -> dict[str, int | str]:
    return {k: NONEXISTENT_DINER if k == "diner_id" else NONEXISTENT_ID for k in ids}


def secrets_of(world: World) -> list[str]:
    """Strings that would give A's data away in an answer to B."""
    return [
        world.dish.name,
        world.coupon.code,
        *(str(o.pk) for o in world.orders.values()),
        world.publishable_key.split(".")[0],
        world.merchant_key.split(".")[0],
        *world.tokens.values(),
    ]


def foreign_body(world: World) -> bytes:
    """One body that aims every known body field at A's rows."""
    return json.dumps(
        {
            "items": [{"dish_id": world.dish.pk, "quantity": 1}],
            "payment_method": "card",
            "coupon_code": world.coupon.code,
            "note": "",
            "to": OrderStatus.CANCELLED,
            "count": 1,
            "tokens": ["tok_foreign"],
            "diner_id": ORDER_DINER,
            "order_id": str(next(iter(world.orders.values())).pk),
        }
    ).encode()


@pytest.mark.parametrize("key_kind", list(KINDS))
@pytest.mark.parametrize("endpoint, method", API_CASES)
def test_api_with_b_credentials_and_a_ids_is_not_found_and_changes_nothing(
    a_with_orders: World, world_b: World, endpoint: Endpoint, method: str, key_kind: str
) -> None:
    world_a = a_with_orders
    http = APIClient(raise_request_exception=False)
    meta = {
        # a session of B's diner with the very id of A's orders' diner, and the header naming it
        "HTTP_AUTHORIZATION": world_b.auth(key_kind, diner=ORDER_DINER),
        "HTTP_X_DINER_ID": ORDER_DINER,
    }
    callback = endpoint.route.endswith("payments/callback/")
    before = snapshot(world_a.tenant)

    def send(ids: dict[str, int], with_key: bool) -> Any:
        extra = {"HTTP_IDEMPOTENCY_KEY": f"sweep-{uuid.uuid4().hex}"} if with_key else {}
        return http.generic(
            method,
            endpoint.path(**ids),
            foreign_body(world_a) if method != "GET" else b"",
            content_type="application/json",
            **meta,
            **extra,
        )

    for with_key in (False, True):
        for ids in foreign_ids(world_a) if endpoint.kwargs else [{}]:
            response = send(ids, with_key)
            assert response.status_code < 500, response.content[:300]
            if not callback and not endpoint.allows(key_kind, method):
                assert_problem(response, 403, "PERMISSION_DENIED")
            elif endpoint.kwargs:
                # exactly the answer for an id that does not exist
                missing = send(nonexistent(ids), with_key)
                if missing.status_code == 200:  # e.g. "revoked 0 sessions of that diner"
                    assert (response.status_code, response.json()) == (200, missing.json())
                    continue
                code = problem_of(missing)["code"]
                assert code.endswith("NOT_FOUND"), code
                assert_problem(response, 404, code)
                if method == "GET":  # the control: A's own diner does see the row
                    own = http.get(
                        endpoint.path(**ids),
                        HTTP_AUTHORIZATION=world_a.auth("diner", diner=ORDER_DINER),
                    )
                    assert own.status_code == 200, own.content[:300]
            text = response.content.decode("utf-8", "replace")
            leaked = [s for s in secrets_of(world_a) if s in text]
            assert not leaked, (endpoint.route, method, leaked, text[:300])
    assert snapshot(world_a.tenant) == before


def test_ordering_a_dish_of_another_tenant_is_dish_not_found(
    a_with_orders: World, world_b: World
) -> None:
    before = snapshot(a_with_orders.tenant)
    response = APIClient().post(
        "/api/v1/orders/",
        {"items": [{"dish_id": a_with_orders.dish.pk, "quantity": 1}], "payment_method": "card"},
        format="json",
        HTTP_AUTHORIZATION=world_b.auth(),
        HTTP_IDEMPOTENCY_KEY="b-orders-a-dish",
    )
    assert_problem(response, 422, "DISH_NOT_FOUND")
    assert snapshot(a_with_orders.tenant) == before


def test_another_tenants_coupon_is_invalid_and_its_use_count_unchanged(
    world_a: World, world_b: World
) -> None:
    before = snapshot(world_a.tenant)
    response = APIClient().post(
        "/api/v1/orders/",
        {
            "items": [{"dish_id": world_b.dish.pk, "quantity": 1}],
            "payment_method": "card",
            "coupon_code": world_a.coupon.code,
        },
        format="json",
        HTTP_AUTHORIZATION=world_b.auth(),
        HTTP_IDEMPOTENCY_KEY="b-uses-a-coupon",
    )
    assert_problem(response, 422, "COUPON_INVALID")
    assert snapshot(world_a.tenant) == before
    assert Order.all_tenants.filter(tenant=world_b.tenant).count() == 0


def test_another_tenants_idempotency_token_is_invalid_for_b(world_a: World, world_b: World) -> None:
    issued = APIClient().post(
        "/api/v1/idempotency-tokens/",
        {"count": 1},
        format="json",
        HTTP_AUTHORIZATION=world_a.auth(),
    )
    assert issued.status_code == 201, issued.content
    token = issued.json()["tokens"][0]
    b = {"HTTP_AUTHORIZATION": world_b.auth()}  # the same diner id ("d1"), another tenant

    checked = APIClient().post(
        "/api/v1/idempotency-tokens/check/", {"tokens": [token]}, format="json", **b
    )
    used = APIClient().post(
        "/api/v1/orders/",
        {"items": [{"dish_id": world_b.dish.pk, "quantity": 1}], "payment_method": "card"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=token,
        **b,
    )

    assert checked.status_code == 200
    assert checked.json()["results"] == [{"token": token, "status": "invalid"}]
    assert_problem(used, 400, "IDEMPOTENCY_TOKEN_INVALID")
    assert Order.all_tenants.count() == 0


# --- idempotency keys across tenants ------------------------------------------------------


def place(world: World, *, key: str | None, dish_id: int) -> Any:
    headers = {"HTTP_AUTHORIZATION": world.auth(diner="d1")}
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return APIClient().generic(
        "POST",
        "/api/v1/orders/",
        json.dumps({"items": [{"dish_id": dish_id, "quantity": 1}], "payment_method": "card"}),
        content_type="application/json",
        **headers,
    )


def test_a_key_replayed_by_b_is_bs_own_execution(
    engine_mode: str, world_a: World, world_b: World
) -> None:
    key = "shared-key-0001"
    first = place(world_a, key=key, dish_id=world_a.dish.pk)
    assert first.status_code == 201
    before = snapshot(world_a.tenant)

    same_bytes = place(world_b, key=key, dish_id=world_a.dish.pk)  # byte-identical request
    own_dish = place(world_b, key=key + "-b", dish_id=world_b.dish.pk)
    same_key_own_dish = place(world_b, key=key, dish_id=world_b.dish.pk)
    replay_for_a = place(world_a, key=key, dish_id=world_a.dish.pk)

    assert_problem(same_bytes, 422, "DISH_NOT_FOUND")
    assert same_bytes["X-Idempotent-Result"] == "MISS"
    assert same_bytes.content != first.content
    assert own_dish.status_code == 201
    # B reusing "its" key with another payload is REUSED within B's scope, never A's answer
    assert_problem(same_key_own_dish, 422, "IDEMPOTENCY_KEY_REUSED")
    assert replay_for_a.status_code == 201
    assert replay_for_a["X-Idempotent-Result"] == "HIT"
    assert replay_for_a.content == first.content
    assert snapshot(world_a.tenant) == before
    assert Order.all_tenants.filter(tenant=world_b.tenant).count() == 1


def test_the_same_key_on_a_fresh_tenant_executes_there(
    engine_mode: str, world_a: World, world_b: World
) -> None:
    key = "same-key-everywhere"
    a = place(world_a, key=key, dish_id=world_a.dish.pk)
    b = place(world_b, key=key, dish_id=world_b.dish.pk)

    assert (a.status_code, b.status_code) == (201, 201)
    assert (a["X-Idempotent-Result"], b["X-Idempotent-Result"]) == ("MISS", "MISS")
    assert a.json()["id"] != b.json()["id"]
    assert Order.all_tenants.get(pk=b.json()["id"]).tenant == world_b.tenant


@pytest.mark.parametrize("with_key", [True, False], ids=["own-key", "automatic-key"])
def test_a_pay_answer_is_never_replayed_to_b(
    engine_mode: str, a_with_orders: World, world_b: World, with_key: bool
) -> None:
    order = a_with_orders.orders[OrderStatus.CREATED]
    headers = {}
    if with_key:
        headers["HTTP_IDEMPOTENCY_KEY"] = "pay-once"
    paid = APIClient().post(
        f"/api/v1/orders/{order.pk}/pay/",
        HTTP_AUTHORIZATION=a_with_orders.auth(diner=ORDER_DINER),
        **headers,
    )
    assert paid.status_code == 200, paid.content
    before = snapshot(a_with_orders.tenant)

    foreign = APIClient().post(
        f"/api/v1/orders/{order.pk}/pay/",
        HTTP_AUTHORIZATION=world_b.auth(diner=ORDER_DINER),  # the same diner id, in B
        **headers,
    )

    assert_problem(foreign, 404, "ORDER_NOT_FOUND")
    assert foreign.get("X-Idempotent-Result") in {None, "MISS"}
    assert snapshot(a_with_orders.tenant) == before


# --- dashboard --------------------------------------------------------------------------


DASHBOARD_FORM = {
    "to": OrderStatus.CANCELLED,
    "price": "0.01",
    "stock": "0",
    "stock_seen": "1000",
    "active": "",
}
DASHBOARD_CASES = [
    pytest.param(e, method, with_token, id=f"{method} /{e.route}{suffix}")
    for e in dashboard_pages_with_ids()
    for method, with_token, suffix in (
        ("GET", False, ""),
        ("POST", False, " no-token"),
        ("POST", True, " token-of-b"),
    )
]


@pytest.mark.parametrize("page, method, with_token", DASHBOARD_CASES)
def test_dashboard_with_b_owner_and_a_ids_is_not_found_and_changes_nothing(
    a_with_orders: World, world_b: World, page: Endpoint, method: str, with_token: bool
) -> None:
    world_a = a_with_orders
    b_owner = owner_of(world_b, "b-owner")
    a_owner = owner_of(world_a, "a-owner")
    before = snapshot(world_a.tenant)

    def send(ids: dict[str, int]) -> Any:
        if method == "GET":
            return b_owner.get(page.path(**ids))
        data = dict(DASHBOARD_FORM)
        if with_token:  # a fresh one-time token from one of B's own pages
            data["idempotency_key"] = form_token(b_owner.get("/dashboard/menu/").content.decode())
        return b_owner.post(page.path(**ids), data)

    for ids in foreign_ids(world_a):
        foreign = send(ids)
        missing = send(nonexistent(ids))
        # indistinguishable from an id that does not exist: 404 (or 405 for a POST-only page)
        assert foreign.status_code == missing.status_code, (foreign, missing)
        assert foreign.status_code in {403, 404, 405}, foreign
        leaked = [s for s in secrets_of(world_a) if s in foreign.content.decode()]
        assert not leaked, leaked
        if method == "GET" and foreign.status_code == 404:  # the control: A's owner sees it
            assert a_owner.get(page.path(**ids)).status_code == 200
    assert snapshot(world_a.tenant) == before


@pytest.mark.parametrize(
    "page", [pytest.param(p, id=f"/{p.route}") for p in dashboard_pages_without_ids()]
)
def test_dashboard_lists_show_none_of_as_rows(
    a_with_orders: World, world_b: World, page: Endpoint
) -> None:
    b_owner = owner_of(world_b, "b-owner")
    response = b_owner.get(page.path())
    assert response.status_code in {200, 405}, response
    leaked = [s for s in secrets_of(a_with_orders) if s in response.content.decode()]
    assert not leaked, leaked
