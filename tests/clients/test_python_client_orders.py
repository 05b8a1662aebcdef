"""The Python client (clients/python) reading and paying orders as its README shows, against a
live gunicorn: paging the order list by cursor, and paying an order that costs nothing."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from ordering_client import OrderingClient, RetryPolicy

from ordering.models import Coupon, Payment
from tests.clients.conftest import Shop
from tests.support.live_server import LiveServer

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PAGE = 20  # the order list's page size


@pytest.fixture
def client(client_server: LiveServer, shop: Shop) -> Iterator[OrderingClient]:
    with OrderingClient(
        client_server.url, shop.publishable_key, retry=RetryPolicy(max_attempts=1)
    ) as made:
        yield made


def cursor_of(link: str | None) -> str | None:
    """The README's idiom: the ``cursor`` a ``next`` (or ``previous``) link carries."""
    return None if link is None else parse_qs(urlsplit(link).query)["cursor"][0]


def test_a_loop_from_no_cursor_reads_every_order_once_newest_first(
    client: OrderingClient, shop: Shop
) -> None:
    """``cursor=None`` (and ``status=None``) leave the parameter out: the first page is the
    newest, not a 400 for an empty parameter (red: the first call was 400 VALIDATION_ERROR for
    ``?status=``, or CURSOR_INVALID for ``?cursor=``)."""
    placed = [client.place_order(shop.order_body(n)).json()["id"] for n in range(1, PAGE + 2)]

    seen: list[str] = []
    counts: list[int] = []
    cursor: str | None = None
    while True:
        page = client.orders(status=None, cursor=cursor)
        seen += [order["id"] for order in page["results"]]
        counts.append(page["count"])
        cursor = cursor_of(page["next"])
        if cursor is None:
            break

    assert seen == placed[::-1]
    assert counts == [PAGE + 1, PAGE + 1]


def test_a_status_filter_pages_by_cursor_too(client: OrderingClient, shop: Shop) -> None:
    first = client.place_order(shop.order_body()).json()["id"]
    client.pay_order(first)
    client.place_order(shop.order_body(2))

    page = client.orders(status="PAYING")

    assert [order["id"] for order in page["results"]] == [first]
    assert (page["count"], page["next"], page["previous"]) == (1, None, None)


def test_a_filtered_list_keeps_its_filter_only_with_the_status_passed_again(
    client: OrderingClient, shop: Shop
) -> None:
    """The README's loop passes ``status`` with each page's cursor: the cursor is a place in
    the list, not its filter, so a cursor alone reads every order from there."""
    paying = []
    for n in range(1, PAGE + 3):
        order = client.place_order(shop.order_body(n)).json()["id"]
        if n > 1:
            client.pay_order(order)
            paying.append(order)

    first = client.orders(status="PAYING")
    cursor = cursor_of(first["next"])
    kept = client.orders(status="PAYING", cursor=cursor)
    alone = client.orders(cursor=cursor)

    assert "status=PAYING" in first["next"]
    assert [o["id"] for o in first["results"] + kept["results"]] == paying[::-1]
    assert (kept["count"], kept["next"]) == (PAGE + 1, None)
    assert {o["status"] for o in alone["results"]} == {"PAYING", "CREATED"}
    assert alone["count"] == PAGE + 2


def test_an_order_that_costs_nothing_is_paid_with_no_payment(
    client: OrderingClient, shop: Shop
) -> None:
    Coupon.objects.for_tenant(shop.tenant).create(
        tenant=shop.tenant, code="FREE", kind=Coupon.Kind.PERCENT, value=Decimal("100"), max_uses=5
    )
    order = client.place_order({**shop.order_body(), "coupon_code": "free"}).json()
    assert (order["total"], order["status"]) == ("0.00", "CREATED")

    paid = client.pay_order(order["id"])

    assert (paid.status, paid.replayed) == (200, False)
    assert (paid.json()["status"], paid.json()["payment"]) == ("PAID", None)
    assert client.order(order["id"])["payment"] is None
    assert not Payment.objects.for_tenant(shop.tenant).exists()
