"""Taking an order's portions off the menu's stock (and giving a cancelled order's back):
every dish in one statement, locks in order.

Each dish is taken by a conditional decrement (``stock >= q``: no overselling) that also returns
the name and price the order's line freezes. Two orders of the same dishes must lock the dish
rows in the same order, or each could hold a row the other waits for (a deadlock, which
PostgreSQL breaks by failing one of them): rows are always locked in primary-key order.

- One dish: one ``UPDATE ... RETURNING``.
- Several dishes on PostgreSQL: one statement for all of them, instead of one round trip per
  dish. A CTE selects the dishes ``ORDER BY id FOR UPDATE`` (PostgreSQL sorts, then locks in
  that order; a row another order changed meanwhile is checked again once it is locked), and
  the ``UPDATE`` decrements exactly the rows it locked. Measured on loopback with a three-dish
  order: one statement against three, about 450 against 700 µs of wall time and 125 against
  230 to 270 µs of the client's CPU (``docs/benchmarks.md``, the causes table). For one dish the
  plain ``UPDATE`` is cheaper for PostgreSQL (about 180 against 250 to 290 µs of its CPU), so it
  stays.
- Other databases (the embedded demo's SQLite, where a transaction holds the one writer lock
  from its start) take the dishes one statement each, in primary-key order.

A dish that could not be taken (unknown, another tenant's, off the menu, too few portions) is
explained by :func:`_refusal`, with the same precedence whichever way the stock was taken.
Giving stock back (:func:`give_back`) is the same statement with an increment and no condition
but the tenant: a dish taken off the menu since gets its portions back too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection

from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Dish
from ordering.models.menu import MAX_STOCK
from tenants.models import Tenant

CENT = Decimal("0.01")


@dataclass(frozen=True)
class TakenDish:
    """What an order line freezes of a dish, as the stock update returned it."""

    name: str
    price: Decimal


@dataclass(frozen=True)
class _Change:
    """How a statement changes stock: a take (``-``) decrements an active dish that has enough,
    a give-back (``+``) increments any dish of the tenant."""

    sign: str

    @property
    def checks(self) -> bool:
        """Whether the statement has the take's condition (its parameters: the dish is active,
        and for one dish the quantity it must have)."""
        return self.sign == "-"

    def changed(self, stock: str, quantity: str) -> str:
        """The new stock. A give-back stops at :data:`MAX_STOCK`, the most a dish may hold (the
        menu's schema promises it): a dish set to the most while an order held some portions
        would otherwise show more than that once the order is cancelled."""
        if self.checks:
            return f"{stock} - {quantity}"
        least = "LEAST" if connection.vendor == "postgresql" else "MIN"
        return f"{least}({stock} + {quantity}, {MAX_STOCK})"

    @property
    def one(self) -> str:
        """One dish's ``SET`` and ``WHERE`` (parameters: the quantity, the dish, the tenant,
        then the condition's)."""
        condition = "AND active = %s AND stock >= %s" if self.checks else ""
        return f"stock = {self.changed('stock', '%s')} WHERE id = %s AND tenant_id = %s {condition}"

    @property
    def together(self) -> tuple[str, str]:
        """The ``SET`` value and the lock's extra condition, for several dishes."""
        condition = "AND dish.active = %s AND dish.stock >= wanted.quantity" if self.checks else ""
        return self.changed("dish.stock", "locked.quantity"), condition


_TAKE = _Change("-")
_GIVE_BACK = _Change("+")


def take_stock(*, tenant: Tenant, quantities: Mapping[int, int]) -> dict[int, TakenDish]:
    """Take ``quantities`` (dish id -> portions) of ``tenant``'s active dishes, all or none,
    inside the caller's transaction; the taken dishes by id, in primary-key order. Raises
    :class:`OrderingError` when any dish cannot be taken: the caller's transaction must then
    be rolled back (it may have taken the others)."""
    dish_ids = sorted(quantities)
    rows = _change(tenant=tenant, quantities=quantities, change=_TAKE)
    short = [dish_id for dish_id in dish_ids if dish_id not in rows]
    if short:
        raise _refusal(tenant=tenant, dish_ids=dish_ids, short_dish_id=short[0])
    # SQLite hands back the price as a float or int: the line keeps the exact 2-place value.
    return {
        dish_id: TakenDish(name=name, price=Decimal(str(price)).quantize(CENT))
        for dish_id, (name, price) in sorted(rows.items())
    }


def give_back(*, tenant: Tenant, quantities: Mapping[int, int]) -> None:
    """Put ``quantities`` (dish id -> portions) back on ``tenant``'s menu, on or off it: a
    cancelled order's. The rows are locked in primary-key order as when they were taken, every
    dish in one statement on PostgreSQL."""
    _change(tenant=tenant, quantities=quantities, change=_GIVE_BACK)


def _change(
    *, tenant: Tenant, quantities: Mapping[int, int], change: _Change
) -> dict[int, tuple[str, object]]:
    """Every dish's stock changed, in primary-key order: on PostgreSQL several dishes in one
    statement, else one statement per dish, stopping at the first a take could not take;
    (name, price) by id of the dishes changed."""
    dish_ids = sorted(quantities)
    if connection.vendor == "postgresql" and len(dish_ids) > 1:
        return _change_together(
            tenant=tenant, quantities=quantities, dish_ids=dish_ids, change=change
        )
    rows: dict[int, tuple[str, object]] = {}
    for dish_id in dish_ids:
        quantity = quantities[dish_id]
        row = _change_one(tenant=tenant, dish_id=dish_id, quantity=quantity, change=change)
        if row is None:
            break
        rows[dish_id] = row
    return rows


def _change_one(
    *, tenant: Tenant, dish_id: int, quantity: int, change: _Change
) -> tuple[str, object] | None:
    """One dish's stock changed by ``quantity``: its (name, price), or None when a take found
    too little (or no such active dish)."""
    params: list[object] = [quantity, dish_id, tenant.pk]
    if change.checks:
        params += [True, quantity]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table()} SET {change.one} RETURNING name, price",
            params,
        )
        return cursor.fetchone()


def _change_together(
    *, tenant: Tenant, quantities: Mapping[int, int], dish_ids: list[int], change: _Change
) -> dict[int, tuple[str, object]]:
    """Every dish's change in one statement, the rows locked in primary-key order (module
    docstring); (name, price) by id of the dishes changed. A dish missing from a take's answer
    was not taken, and the others were: the caller's transaction is rolled back by the refusal."""
    table = _table()
    new_stock, condition = change.together
    wanted = ", ".join(["(%s::bigint, %s::integer)"] * len(dish_ids))
    params: list[object] = []
    for dish_id in dish_ids:
        params += [dish_id, quantities[dish_id]]
    params.append(tenant.pk)
    if change.checks:
        params.append(True)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH wanted (id, quantity) AS (VALUES {wanted}), "
            "locked AS ("
            f"SELECT dish.id, wanted.quantity FROM {table} dish "
            "JOIN wanted ON wanted.id = dish.id "
            f"WHERE dish.tenant_id = %s {condition} "
            "ORDER BY dish.id FOR UPDATE OF dish) "
            f"UPDATE {table} dish SET stock = {new_stock} FROM locked "
            "WHERE dish.id = locked.id RETURNING dish.id, dish.name, dish.price",
            params,
        )
        return {dish_id: (name, price) for dish_id, name, price in cursor.fetchall()}


def _table() -> str:
    return connection.ops.quote_name(Dish._meta.db_table)


def _refusal(*, tenant: Tenant, dish_ids: list[int], short_dish_id: int) -> OrderingError:
    """Why the stock update took nothing of ``short_dish_id`` (the first dish, by id, that it
    could not take): the same answers, in the same order of precedence, as checking every dish
    before taking any stock."""
    dishes = Dish.objects.for_tenant(tenant).in_bulk(dish_ids)
    missing = sorted(set(dish_ids) - set(dishes))
    if missing:
        return OrderingError(OrderingErrorCode.DISH_NOT_FOUND, "Unknown dish", dish_ids=missing)
    inactive = sorted(d for d, dish in dishes.items() if not dish.active)
    if inactive:
        return OrderingError(
            OrderingErrorCode.DISH_UNAVAILABLE, "Dish is not on the menu now", dish_ids=inactive
        )
    return OrderingError(
        OrderingErrorCode.INSUFFICIENT_STOCK,
        f"Not enough '{dishes[short_dish_id].name}' left",
        dish_id=short_dish_id,
    )
