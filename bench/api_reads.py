"""What the API's reads cost a worker: the menu, a diner's orders, a merchant's orders, one order.

    .venv/bin/python -m bench.api_reads [--dishes 50] [--orders 40] [--requests 300] [--rounds 3]

A diner's app reads the menu whenever it opens and its orders while it waits for them; a
restaurant's backend lists the tenant's orders. A child process with the settings of
``bench/cpu_per_request.py`` (DEBUG off, persistent database connection, a throwaway database)
seeds one tenant with ``--dishes`` dishes and ``--orders`` one-line orders of one diner, then
sends each read through Django's test client, counting the process's CPU time per request
(``time.process_time``), the statements sent and the bytes answered. Cases, interleaved round
by round:

- ``menu``: ``GET /api/v1/menu/`` with the app's publishable key (every active dish);
- ``orders_diner``: ``GET /api/v1/orders/`` with the diner's session (a page of 20 orders);
- ``orders_merchant``: ``GET /api/v1/orders/`` with the restaurant's backend key;
- ``order_detail``: ``GET /api/v1/orders/<id>/`` with the diner's session.
"""

from __future__ import annotations

import argparse
import json
import sys
from statistics import median
from typing import Any

from bench.cpu_per_request import (
    add_child_arguments,
    child_options,
    measure_in_child,
    timed_gets,
)

DB_NAME = "bench_api_reads"
CASES = ("menu", "orders_diner", "orders_merchant", "order_detail")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dishes", type=int, default=50, help="on the menu")
    parser.add_argument("--orders", type=int, default=40, help="of one diner")
    parser.add_argument("--requests", type=int, default=300, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    add_child_arguments(parser, db_name=DB_NAME)
    args = parser.parse_args()
    payload = {key: getattr(args, key) for key in ("dishes", "orders", "requests", "rounds")}
    report(measure_in_child("bench.api_reads", child_options(args), payload), args)


def report(measured: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"API reads, {args.dishes} dishes, {args.orders} orders: worker CPU µs", end="")
    print(f" per request (median of {args.rounds} rounds of {args.requests})")
    print(f"{'case':<17}{'status':>7}{'bytes':>8}{'queries':>9}{'worker':>8}  worker rounds")
    for case in CASES:
        row = measured[case]
        rounds = ", ".join(f"{value:.0f}" for value in row["cpu"])
        print(f"{case:<17}{row['status']:>7}{row['bytes']:>8}{row['queries']:>9}", end="")
        print(f"{median(row['cpu']):>8.0f}  {rounds}")


# --- the measuring process --------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0, interactive=False)
    payload = json.loads(sys.stdin.read())
    requests = _seeded(payload["dishes"], payload["orders"])
    client = Client(HTTP_HOST="127.0.0.1")
    for path, headers in requests.values():  # warm every code path first
        timed_gets(client, path, headers, 20)
    measured: dict[str, dict[str, Any]] = {case: {"cpu": []} for case in CASES}
    for _ in range(payload["rounds"]):
        for case in CASES:
            read = timed_gets(client, *requests[case], payload["requests"])
            measured[case]["cpu"].append(read.pop("cpu"))
            measured[case].update(read)
    print(json.dumps(measured))


def _seeded(dishes: int, orders: int) -> dict[str, tuple[str, dict[str, str]]]:
    """A tenant with a menu of ``dishes`` and ``orders`` one-line orders of one diner, every
    third one being paid for; each case's path and headers."""
    from decimal import Decimal

    from ordering.models import Dish
    from ordering.services.payments import pay_order
    from ordering.services.placing import ItemRequest, place_order
    from tenants.api_keys import issue_api_key
    from tenants.diner_sessions import open_session
    from tenants.models import ApiClient, Tenant

    tenant = Tenant.objects.create(slug="bench-reads", name="Bench reads")
    menu = [
        Dish.objects.for_tenant(tenant).create(
            tenant=tenant,
            name=f"Dish {n + 1}",
            description="Tomato, mozzarella, basil",
            price=Decimal("9.50"),
            stock=10**9,
        )
        for n in range(dishes)
    ]
    placed = []
    for n in range(orders):
        item = ItemRequest(dish_id=menu[n % len(menu)].pk, quantity=1 + n % 3)
        order = place_order(
            tenant=tenant, items=[item], payment_method="card", diner_id="diner", actor="bench"
        )
        if n % 3 == 0:
            pay_order(tenant=tenant, order_id=order.pk, actor="bench")
        placed.append(order.pk)
    _, app_key = issue_api_key(tenant=tenant, name="app")
    backend, backend_key = issue_api_key(
        tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT
    )
    diner = {"HTTP_AUTHORIZATION": f"Bearer {open_session(client=backend, diner_id='diner').token}"}
    return {
        "menu": ("/api/v1/menu/", {"HTTP_AUTHORIZATION": f"Api-Key {app_key}"}),
        "orders_diner": ("/api/v1/orders/", diner),
        "orders_merchant": ("/api/v1/orders/", {"HTTP_AUTHORIZATION": f"Api-Key {backend_key}"}),
        "order_detail": (f"/api/v1/orders/{placed[-1]}/", diner),
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()
