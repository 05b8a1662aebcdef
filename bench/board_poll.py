"""What the orders board's poll costs a worker: a board that changed against one that did not.

    .venv/bin/python -m bench.board_poll [--orders 200] [--polls 200] [--rounds 3]

Every open board asks ``/dashboard/board/fragment/`` for its columns every few seconds, so this
is the dashboard's most frequent request. A child process with the settings of
``bench/cpu_per_request.py`` (DEBUG off, persistent database connection, a throwaway database)
places ``--orders`` orders for one tenant, logs a merchant in and polls through Django's test
client, counting the process's CPU time per poll (``time.process_time``), the statements sent
and the bytes answered. Two cases, interleaved round by round:

- ``changed``: a poll without ``If-None-Match``, as when a card has changed: the columns are
  read and rendered (every poll cost this before the board sent its tag);
- ``unchanged``: a poll with the tag of the columns shown, as while nothing has changed: 304,
  after one read of the cards' columns.
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

DB_NAME = "bench_board"
FRAGMENT = "/dashboard/board/fragment/"
CASES = ("changed", "unchanged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--orders", type=int, default=200, help="on the board (it shows 200)")
    parser.add_argument("--polls", type=int, default=200, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    add_child_arguments(parser, db_name=DB_NAME)
    args = parser.parse_args()
    opts = child_options(args)
    payload = {"orders": args.orders, "polls": args.polls, "rounds": args.rounds}
    report(measure_in_child("bench.board_poll", opts, payload), args)


def report(measured: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"board poll, {args.orders} orders placed: worker CPU µs per poll", end="")
    print(f" (median of {args.rounds} rounds of {args.polls} polls)")
    print(f"{'case':<11}{'status':>7}{'bytes':>8}{'queries':>9}{'worker':>8}  worker rounds")
    cpu = {}
    for case in CASES:
        row = measured[case]
        cpu[case] = median(row["cpu"])
        rounds = ", ".join(f"{value:.0f}" for value in row["cpu"])
        print(f"{case:<11}{row['status']:>7}{row['bytes']:>8}{row['queries']:>9}", end="")
        print(f"{cpu[case]:>8.0f}  {rounds}")
    print(f"unchanged / changed worker CPU: {cpu['unchanged'] / cpu['changed']:.2f}")


# --- the measuring process --------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0, interactive=False)
    payload = json.loads(sys.stdin.read())
    merchant = Client(HTTP_HOST="localhost")
    merchant.force_login(_board_with_orders(payload["orders"]))
    tag = merchant.get(FRAGMENT)["ETag"]
    headers = {"changed": {}, "unchanged": {"HTTP_IF_NONE_MATCH": tag}}
    for case in CASES:  # warm every code path first
        timed_gets(merchant, FRAGMENT, headers[case], 20)
    measured: dict[str, dict[str, Any]] = {case: {"cpu": []} for case in CASES}
    for _ in range(payload["rounds"]):
        for case in CASES:
            poll = timed_gets(merchant, FRAGMENT, headers[case], payload["polls"])
            measured[case]["cpu"].append(poll.pop("cpu"))
            measured[case].update(poll)
    print(json.dumps(measured))


def _board_with_orders(count: int) -> Any:
    """A tenant with ``count`` orders, every third one being paid for; its owner."""
    from decimal import Decimal

    from django.contrib.auth.models import User

    from ordering.models import Dish
    from ordering.services.payments import pay_order
    from ordering.services.placing import ItemRequest, place_order
    from tenants.models import Membership, Tenant

    tenant = Tenant.objects.create(slug="bench-board", name="Bench board")
    dishes = [
        Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name=name, price=Decimal("9.50"), stock=10**9
        )
        for name in ("Margherita", "Carbonara", "Tiramisu")
    ]
    for n in range(count):
        items = [ItemRequest(dish_id=dish.pk, quantity=1 + n % 3) for dish in dishes[: 1 + n % 3]]
        order = place_order(
            tenant=tenant, items=items, payment_method="card", diner_id="diner", actor="bench"
        )
        if n % 3 == 0:
            pay_order(tenant=tenant, order_id=order.pk, actor="bench")
    owner = User.objects.create_user("bench-board-owner")
    Membership.objects.create(user=owner, tenant=tenant, role="owner")
    return owner


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()
