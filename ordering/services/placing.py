"""Placing an order: price it server-side, take the stock and the coupon, all or nothing."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection
from django.db.models import Q
from django.utils import timezone

from idempotency.core.transactions import business_atomic
from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Coupon, Order, OrderLine, OrderStatus, OrderTransition
from ordering.one_statement import insert_together
from ordering.order_ids import (
    ClockMovedBackwards,
    dish_bucket,
    next_order_id,
    recheck_process_lease,
)
from ordering.order_numbers import business_day, numbered
from ordering.prefetch import with_related
from ordering.services.stock import take_stock
from ordering.worker_ids import NoWorkerIdAvailable, WorkerLeaseLost
from tenants.models import ApiClient, Tenant
from tenants.routing import tenant_shard

MAX_QUANTITY_PER_LINE = 100
MAX_LINES = 50


def _largest_amount() -> Decimal:
    """The largest amount an order's money columns hold (12 digits, 2 of them decimals)."""
    field = Order._meta.get_field("subtotal")
    return Decimal(10) ** (field.max_digits - field.decimal_places) - Decimal(1).scaleb(
        -field.decimal_places
    )


# An order's subtotal, before any coupon, is at most this: dishes up to 99,999,999.99 each,
# 100 portions a line and 50 lines add up to more than the columns hold, and the write failed
# as a 500 with the stock and coupon already taken (rolled back).
MAX_ORDER_AMOUNT = _largest_amount()
PAYMENT_METHODS = ("card", "wallet", "cash")


@dataclass(frozen=True)
class ItemRequest:
    dish_id: int
    quantity: int


def place_order(
    *,
    tenant: Tenant,
    items: Sequence[ItemRequest],
    payment_method: str,
    diner_id: str | None = None,
    client: ApiClient | None = None,
    coupon_code: str | None = None,
    note: str = "",
    contact_phone: str = "",
    delivery_address: str = "",
    idempotency_key: str | None = None,
    actor: str,
) -> Order:
    """Create an order in CREATED, or raise :class:`OrderingError` having written nothing.

    Stock is taken with a conditional decrement (``stock >= q``), on PostgreSQL every dish in
    one statement, the dish rows locked in primary key order (no overselling, no deadlock
    between two orders of the same dishes; it reads the name and price the lines freeze too:
    :mod:`ordering.services.stock`), the coupon with a conditional increment of its use count;
    then one statement takes the day's short order number and writes the order, its lines and
    its first transition. Any refusal rolls the whole transaction back, including an order ID
    the database already holds (:func:`_order_id_collision`).
    Lines of the same dish are merged; the first item's dish is the order's primary dish.

    The order comes back with its lines, its transition log and its (empty) payments in hand
    (:func:`ordering.prefetch.with_related`), so an answer can be rendered without reading
    back what was just written.

    A coupon code is read in capitals, as the dashboard writes every code: a diner typing
    ``welcome10`` means ``WELCOME10``, not an unknown coupon.
    """
    quantities = _merge_lines(items)
    try:
        with business_atomic():
            dishes = take_stock(tenant=tenant, quantities=quantities)  # stock.py
            subtotal = sum(
                (dishes[d].price * q for d, q in quantities.items()), start=Decimal("0.00")
            )
            if subtotal > MAX_ORDER_AMOUNT:
                raise OrderingError(
                    OrderingErrorCode.ORDER_TOTAL_TOO_LARGE,
                    f"An order comes to at most {MAX_ORDER_AMOUNT} before any coupon; this one "
                    f"comes to {subtotal}: order fewer portions",
                    limit=str(MAX_ORDER_AMOUNT),
                )
            coupon = _use_coupon(tenant=tenant, code=coupon_code.upper()) if coupon_code else None
            discount = coupon.discount_for(subtotal) if coupon else Decimal("0.00")
            primary_dish_id = next(iter(quantities))
            day = business_day(tenant)
            number = numbered(tenant=tenant, day=day)  # last: see order_numbers.py
            order = Order(
                id=_issue_order_id(tenant=tenant, primary_dish_id=primary_dish_id),
                tenant=tenant,
                number=number.placeholder,  # taken by the statement that writes the order
                business_day=day,
                diner_id=diner_id or "",
                placed_by_client=client,
                payment_method=payment_method,
                coupon=coupon,
                subtotal=subtotal,
                discount=discount,
                total=subtotal - discount,
                note=note,
                contact_phone=contact_phone,
                delivery_address=delivery_address,
                idempotency_key=idempotency_key,
            )
            lines = [
                OrderLine(
                    tenant=tenant,
                    order=order,
                    dish_id=dish_id,
                    dish_name=dishes[dish_id].name,
                    unit_price=dishes[dish_id].price,
                    quantity=quantity,
                    line_total=dishes[dish_id].price * quantity,
                )
                for dish_id, quantity in quantities.items()
            ]
            created = OrderTransition(
                tenant=tenant,
                order=order,
                from_status="",
                to_status=OrderStatus.CREATED,
                actor=actor,
            )
            insert_together([order], lines, [created], leading=number)  # one_statement.py
    except IntegrityError as exc:
        if not _order_id_taken(exc):
            raise
        raise _order_id_collision() from exc
    return with_related(order, lines=lines, transitions=[created], payments=[])


def _issue_order_id(*, tenant: Tenant, primary_dish_id: int) -> int:
    """The new order's ID, or a 503 the client retries when none can be issued now.

    Each refusal passes: a clock step back is over once the clock is back where it was; a worker
    id frees up when another process releases its lease or lets it lapse, and a lease this
    process failed to renew in time is renewed or replaced by its heartbeat (both within
    ``ORDER_ID_LEASE_SECONDS``; a process shutting down has given its lease back, and the retry
    reaches another). Raised inside the order's transaction, so the stock and coupon already
    taken are rolled back, and as a 5xx the idempotency engine keeps no answer for the key: the
    retry places the order.
    """
    try:
        return next_order_id(
            shard=tenant_shard(tenant.pk), dish_bucket=dish_bucket(primary_dish_id)
        )
    except ClockMovedBackwards as exc:
        retry_after = exc.retry_after_seconds
    except (NoWorkerIdAvailable, WorkerLeaseLost):
        retry_after = settings.ORDER_ID_LEASE_SECONDS
    raise OrderingError(
        OrderingErrorCode.ORDER_ID_UNAVAILABLE,
        f"Orders cannot be numbered right now; retry in {retry_after} s with the same "
        f"Idempotency-Key",
        headers={"Retry-After": str(retry_after)},
    )


def _order_id_taken(exc: IntegrityError) -> bool:
    """Whether the order's ``INSERT`` failed on its primary key: its ID was issued before."""
    diag = getattr(exc.__cause__, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name is not None:
        return name == f"{Order._meta.db_table}_pkey"
    return f"{Order._meta.db_table}.id" in str(exc)  # SQLite names the column


def _order_id_collision() -> OrderingError:
    """The 503 for an order whose ID another process had already used.

    Only two processes holding one worker id issue the same ID, which happens after a Redis node
    lost its data (:mod:`ordering.worker_ids`); this process rechecks its lease at once, which
    gives the shared id up. The transaction was rolled back, nothing was written and the engine
    keeps no answer for a 5xx, so a retry with the same key places the order under a new ID.
    """
    recheck_process_lease()
    return OrderingError(
        OrderingErrorCode.ORDER_ID_UNAVAILABLE,
        "The order's ID was taken by another server; retry in 1 s with the same Idempotency-Key",
        headers={"Retry-After": "1"},
    )


def _merge_lines(items: Sequence[ItemRequest]) -> OrderedDict[int, int]:
    merged: OrderedDict[int, int] = OrderedDict()
    for item in items:
        merged[item.dish_id] = merged.get(item.dish_id, 0) + item.quantity
    for dish_id, quantity in merged.items():
        if quantity > MAX_QUANTITY_PER_LINE:
            raise OrderingError(
                OrderingErrorCode.QUANTITY_INVALID,
                f"At most {MAX_QUANTITY_PER_LINE} portions of one dish per order",
                dish_id=dish_id,
            )
    return merged


def _use_coupon(*, tenant: Tenant, code: str) -> Coupon:
    """Count one use of ``tenant``'s coupon ``code`` and return it, in one statement: an
    increment on condition that the coupon is active, not past its end and not used up, which
    returns the row (``RETURNING``). Concurrent orders never exceed ``max_uses``: each
    increment holds the row's lock and checks the count the last one left. When nothing was
    counted, a read says why: unknown, off or expired (``COUPON_INVALID``), else used up
    (``COUPON_EXHAUSTED``), the same precedence as reading the coupon before counting."""
    now = timezone.now()
    table = connection.ops.quote_name(Coupon._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in Coupon._meta.concrete_fields)
    counted = list(
        Coupon.all_tenants.raw(
            f"UPDATE {table} SET used_count = used_count + 1 "
            "WHERE tenant_id = %s AND code = %s AND active = %s "
            "AND (valid_until IS NULL OR valid_until >= %s) "
            "AND (max_uses IS NULL OR used_count < max_uses) "
            f"RETURNING {columns}",
            [tenant.pk, code, True, connection.ops.adapt_datetimefield_value(now)],
        )
    )
    if counted:
        return counted[0]
    usable = (
        Coupon.objects.for_tenant(tenant)
        .filter(code=code, active=True)
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gte=now))
        .exists()
    )
    if usable:
        raise OrderingError(OrderingErrorCode.COUPON_EXHAUSTED, "Coupon has been used up")
    raise OrderingError(OrderingErrorCode.COUPON_INVALID, "Unknown or expired coupon")
