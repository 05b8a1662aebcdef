"""Merchant-side writes to the menu and coupons: create and edit dishes, create and retire coupons.

Races are settled by the database, never by a read before the write: a duplicate dish name or
coupon code is refused by the ``unique(tenant, ...)`` constraints, a dish edit is a conditional
``UPDATE ... WHERE <each field it changes> = <the value the merchant saw>`` so it cannot silently
undo portions that orders took meanwhile, or a price set in another tab, and retiring a coupon is
``UPDATE ... WHERE active``. A tenant holds at most ``MAX_DISHES_PER_TENANT`` dishes and
``MAX_COUPONS_PER_TENANT`` coupons: a create locks the tenant's row (``FOR NO KEY UPDATE``,
which orders' foreign keys do not wait for) before it counts, so creates racing for the last
places cannot each see room.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import TypeVar

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from ordering.models import Coupon, Dish
from tenants.models import Tenant
from tenants.row_limits import has_room

T = TypeVar("T")

# The most dishes a tenant's menu holds, on the menu or off it (README, Menu & stock): the
# menu's API answer is every active dish, read by anyone holding the public key, so an
# unbounded menu made each read as large as a merchant chose (2,000 dishes: 590 kB).
MAX_DISHES_PER_TENANT = 1_000
# The most active coupons a tenant holds (README, Coupons): each is a code any diner may try.
# Deactivated ones do not count (none is deleted: orders name them), so a restaurant at the
# bound makes room by retiring a campaign, never stops for good.
MAX_COUPONS_PER_TENANT = 1_000


class MenuErrorCode(StrEnum):
    NOT_FOUND = "NOT_FOUND"
    DUPLICATE_NAME = "DUPLICATE_NAME"
    DUPLICATE_CODE = "DUPLICATE_CODE"
    STOCK_CHANGED = "STOCK_CHANGED"
    CHANGED_MEANWHILE = "CHANGED_MEANWHILE"
    INVALID = "INVALID"
    MENU_FULL = "MENU_FULL"
    COUPONS_FULL = "COUPONS_FULL"


class MenuError(Exception):
    """A refused menu write; ``field`` names the form field the message belongs to, if any."""

    def __init__(self, code: MenuErrorCode, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


def create_dish(
    *,
    tenant: Tenant,
    name: str,
    price: Decimal,
    stock: int,
    description: str = "",
    active: bool = True,
) -> Dish:
    """Add a dish; a name the tenant already uses is refused (``DUPLICATE_NAME``), and so is
    a dish past the menu's ``MAX_DISHES_PER_TENANT`` (``MENU_FULL``): nothing is written."""

    def create() -> Dish:
        _hold_room(tenant, Dish.objects.for_tenant(tenant), MAX_DISHES_PER_TENANT, _menu_full())
        return Dish.objects.for_tenant(tenant).create(
            tenant=tenant,
            name=name,
            description=description,
            price=price,
            stock=stock,
            active=active,
        )

    return _insert(
        create,
        unique=("uniq_dish_tenant_name", "ordering_dish.name"),
        duplicate=MenuError(
            MenuErrorCode.DUPLICATE_NAME, "A dish with this name exists.", field="name"
        ),
        refused=MenuError(MenuErrorCode.INVALID, "The dish was refused by the database."),
    )


def update_dish(
    *,
    tenant: Tenant,
    dish_id: int,
    price: Decimal,
    active: bool,
    stock: int,
    stock_seen: int,
    price_seen: Decimal | None = None,
    active_seen: bool | None = None,
) -> Dish:
    """Write what the merchant changed on the form, each field only if it still is what the
    form showed (``<field>_seen``); a field left as shown is not written at all.

    So an edit of one field never undoes another's made meanwhile: orders taking portions
    while the merchant sets a price, or a price set in another tab (or by a colleague) while
    a stale page sets the stock. A changed field that moved meanwhile is refused
    (``STOCK_CHANGED``, ``CHANGED_MEANWHILE``) and nothing is written. ``price_seen`` or
    ``active_seen`` None (a caller that showed no form): that value is written as given.
    """
    seen: dict[str, object] = {"price": price_seen, "active": active_seen, "stock": stock_seen}
    wanted: dict[str, object] = {"price": price, "active": active, "stock": stock}
    changes = {f: v for f, v in wanted.items() if seen[f] is None or v != seen[f]}
    expected = {f: seen[f] for f in changes if seen[f] is not None}
    dishes = Dish.objects.for_tenant(tenant).filter(pk=dish_id)
    with transaction.atomic():
        updated = dishes.filter(**expected).update(**changes) if changes else dishes.count()
        dish = dishes.first()
    if dish is None:
        raise MenuError(MenuErrorCode.NOT_FOUND, "No such dish.")
    if updated != 1:
        raise _moved_meanwhile(dish, expected)
    return dish


def _moved_meanwhile(dish: Dish, expected: dict[str, object]) -> MenuError:
    """The refusal of an edit whose field moved since its form was shown, on that field."""
    if "stock" in expected and dish.stock != expected["stock"]:
        return MenuError(
            MenuErrorCode.STOCK_CHANGED,
            f"Orders changed the stock to {dish.stock} since the page was loaded; "
            "nothing was saved. Check the count and save again.",
            field="stock",
        )
    again = "since the page was loaded (in another tab, or by a colleague); nothing was saved."
    if "price" in expected and dish.price != expected["price"]:
        return MenuError(
            MenuErrorCode.CHANGED_MEANWHILE,
            f"The price was changed to {dish.price} {again} Check it and save again.",
            field="price",
        )
    where = "put on" if dish.active else "taken off"
    return MenuError(
        MenuErrorCode.CHANGED_MEANWHILE,
        f"The dish was {where} the menu {again} Check it and save again.",
        field="active",
    )


def create_coupon(
    *,
    tenant: Tenant,
    code: str,
    kind: str,
    value: Decimal,
    max_uses: int | None = None,
    valid_until: datetime | None = None,
) -> Coupon:
    """Add a coupon; a code the tenant already uses is refused (``DUPLICATE_CODE``), and so
    is an active coupon past ``MAX_COUPONS_PER_TENANT`` (``COUPONS_FULL``): nothing is
    written."""

    def create() -> Coupon:
        full = MenuError(
            MenuErrorCode.COUPONS_FULL,
            f"A restaurant holds at most {MAX_COUPONS_PER_TENANT:,} active coupons, and this "
            "one has them all: deactivate one no longer used (deactivated coupons do not "
            "count), then create this one. Nothing was created.",
            field="code",
        )
        active = Coupon.objects.for_tenant(tenant).filter(active=True)
        _hold_room(tenant, active, MAX_COUPONS_PER_TENANT, full)
        return Coupon.objects.for_tenant(tenant).create(
            tenant=tenant,
            code=code,
            kind=kind,
            value=value,
            max_uses=max_uses,
            valid_until=valid_until,
        )

    return _insert(
        create,
        unique=("uniq_coupon_tenant_code", "ordering_coupon.code"),
        duplicate=MenuError(
            MenuErrorCode.DUPLICATE_CODE, "A coupon with this code exists.", field="code"
        ),
        refused=MenuError(
            MenuErrorCode.INVALID, "The coupon was refused (value out of range?).", field="value"
        ),
    )


def deactivate_coupon(*, tenant: Tenant, coupon_id: int) -> tuple[Coupon, bool]:
    """Stop a coupon from being used by new orders; the coupon, and whether this call did it.
    Deactivating twice (another tab, a colleague) changes nothing and answers False, so the
    second can be told it was done already."""
    coupons = Coupon.objects.for_tenant(tenant).filter(pk=coupon_id)
    changed = coupons.filter(active=True).update(active=False) == 1
    coupon = coupons.first()
    if coupon is None:
        raise MenuError(MenuErrorCode.NOT_FOUND, "No such coupon.")
    return coupon, changed


def _menu_full() -> MenuError:
    return MenuError(
        MenuErrorCode.MENU_FULL,
        f"A restaurant holds at most {MAX_DISHES_PER_TENANT:,} dishes, on the menu or off "
        "it, and this one has them all: nothing was added.",
        field="name",
    )


def _hold_room(tenant: Tenant, rows: QuerySet, limit: int, full: MenuError) -> None:
    """Raise ``full`` when ``rows`` (the tenant's) already hold ``limit``, counted under the
    tenant's lock (:func:`tenants.row_limits.has_room`)."""
    if not has_room(tenant, rows, limit):
        raise full


def _insert(
    create: Callable[[], T], *, unique: tuple[str, str], duplicate: MenuError, refused: MenuError
) -> T:
    """Run ``create``; the database's unique constraint (name, column) decides duplicates."""
    try:
        with transaction.atomic():
            return create()
    except IntegrityError as exc:
        raise (duplicate if _violates(exc, *unique) else refused) from exc


def _violates(exc: IntegrityError, constraint: str, sqlite_column: str) -> bool:
    """Whether ``exc`` is that unique constraint: PostgreSQL names it, SQLite names the column."""
    diag = getattr(exc.__cause__, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name is not None:
        return name == constraint
    return sqlite_column in str(exc)
