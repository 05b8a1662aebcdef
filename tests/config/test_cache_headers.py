"""``Cache-Control: no-store`` on the answers that show a diner's or a restaurant's data
(``config/cache_headers.py``): the dashboard's pages, and the API's."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.hardening.conftest import World, build_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world_a(db: None) -> World:
    return build_world("alpha")


def test_the_api_s_answers_holding_a_token_or_a_diner_s_contact_are_never_stored(
    world_a: World,
) -> None:
    """The API's answers carried no caching policy at all: a diner app's HTTP stack (iOS's
    URLCache writes such answers to its Cache.db on disk) and any browser cache could keep a
    new session's bearer token, and an order with the diner's phone and address, while the
    dashboard showing the same order was ``no-store``. The retried write's replay is too."""
    client = Client()
    opened = client.post(
        "/api/v1/diner-sessions/",
        content_type="application/json",
        HTTP_AUTHORIZATION=world_a.auth("publishable"),
    )
    order = {
        "items": [{"dish_id": world_a.dish.pk, "quantity": 1}],
        "payment_method": "card",
        "contact": {"phone": "+39 333 1234567", "address": "Via Roma 1"},
    }
    placed, replayed = (
        client.post(
            "/api/v1/orders/",
            order,
            content_type="application/json",
            HTTP_AUTHORIZATION=world_a.auth(),
            HTTP_IDEMPOTENCY_KEY="cache-order-1",
        )
        for _ in range(2)
    )
    read = client.get(f"/api/v1/orders/{placed.json()['id']}/", HTTP_AUTHORIZATION=world_a.auth())

    assert (opened.status_code, placed.status_code, replayed.status_code) == (201, 201, 201)
    assert replayed["X-Idempotent-Result"] == "HIT"
    assert read.status_code == 200 and read.json()["contact"]["phone"] == "+39 333 1234567"
    for answer in (opened, placed, replayed, read):
        assert "no-store" in answer.get("Cache-Control", ""), answer.headers


@pytest.mark.parametrize(
    "request_kwargs",
    [
        pytest.param({"path": "/api/v1/no-such-route/"}, id="unknown-route-404"),
        pytest.param({"path": "/api/v1/orders"}, id="path-without-slash-404"),
        pytest.param({"path": "/api/v1/menu/", "HTTP_HOST": "not-served.example"}, id="host-400"),
        pytest.param(
            {"path": "/api/v1/menu/?" + "&".join(["a"] * 1001)}, id="too-many-parameters-400"
        ),
        pytest.param(
            {"path": "/api/v1/orders/", "method": "post", "data": "x" * 65},
            id="body-too-large-413",
        ),
        pytest.param(
            {
                "path": "/api/v1/orders/",
                "method": "post",
                "data": "{}",
                "content_type": "application/json; charset=latin-1",
            },
            id="charset-415",
        ),
    ],
)
def test_the_api_s_refusals_answered_before_or_around_its_views_are_never_stored(
    settings: object, request_kwargs: dict[str, str]
) -> None:
    """Every answer of an ``/api/v1/`` path is ``no-store`` (README, "Dashboard"), refusals
    included. Those the API's own middleware gives before a view runs (a body too large, too
    many query parameters, a charset other than UTF-8) and those it rebuilds as problem+json
    (a route that does not exist, a Host the site does not serve) went without any
    ``Cache-Control``: the first are answered outside the no-store middleware, and the
    rebuilt problem kept none of the page's headers but a few."""
    settings.MAX_REQUEST_BYTES = 64
    kwargs = dict(request_kwargs)
    method = kwargs.pop("method", "get")
    kwargs.setdefault("content_type", "application/json")
    path = kwargs.pop("path")
    answer = getattr(Client(), method)(path, **kwargs)

    assert answer.status_code in {400, 404, 413, 415}, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert "no-store" in answer.get("Cache-Control", ""), answer.headers
