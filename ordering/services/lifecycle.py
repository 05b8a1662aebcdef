"""Moving orders through their lifecycle: one conditional status update per move, logged.

Every move runs in a transaction: the FSM method checks the source state (and conditions), the
save is ``UPDATE ... WHERE status = <loaded status>`` (the check of django-fsm's
ConcurrentTransitionMixin, in a statement built once: ``_save_move``), and the side effects and
the log row are written only by the winner. A move that is not allowed from
the current status raises 409 ``ORDER_STATUS_CONFLICT`` having changed nothing; the answer names
the status the order is in now and the moves it allows from there (``allowed_moves``, read from
the FSM by ``ordering.order_moves``). A request whose move lost a race (another move committed
between its read and its update) is run again on the order as it is now
(:func:`rerun_lost_races`), so it is answered for that status, as the same request sent a
moment later would be, not with a 409 that its key would replay for the record's lifetime.

Cancelling a paid order is the start of the cancel saga (``ordering.background.saga``): the move to
CANCELLING and the ``order.cancel_requested`` outbox event commit together, so the refund
starts exactly when the cancel committed, and never for a cancel that rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from typing import ParamSpec, TypeVar

from django.db import connections, router, transaction
from django.db.models import F
from django_fsm import ConcurrentTransition, TransitionNotAllowed, can_proceed

from ordering.background.outbox import emit_event
from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.metrics import fsm_conflicts
from ordering.models import (
    Coupon,
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    Payment,
)
from ordering.one_statement import insert_together
from ordering.order_moves import allowed_moves, conflict_hint
from ordering.selectors import access_order
from ordering.services.stock import give_back
from tenants.models import Tenant

S = OrderStatus
P = ParamSpec("P")
R = TypeVar("R")
# how many times a request's move is tried while other moves keep committing first
RACE_ATTEMPTS = 3

# Moves a merchant may ask for by target status (PAID only comes from the payment provider).
MERCHANT_MOVES: dict[str, Callable[[Order], Callable[[], None]]] = {
    S.ACCEPTED: lambda order: order.accept,
    S.PREPARING: lambda order: order.start_preparing,
    S.READY: lambda order: order.mark_ready,
    S.DELIVERING: lambda order: order.dispatch,
    S.COMPLETED: lambda order: order.complete,
}
MERCHANT_TARGETS = (*MERCHANT_MOVES, S.CANCELLED)
# the transition log's actor of an order cancelled for being left unpaid (ordering/expiry.py)
EXPIRY_ACTOR = "platform:unpaid-expiry"


class StatusConflict(OrderingError):
    """409 ``ORDER_STATUS_CONFLICT``: the move is not allowed from the order's status, or lost
    a race. :func:`described_conflicts` adds the status the order is in now and the moves it
    allows from there, once the refused transaction has ended."""

    def __init__(self, order: Order, reason: str) -> None:
        super().__init__(OrderingErrorCode.ORDER_STATUS_CONFLICT, reason, order_id=str(order.pk))
        self.order_id = order.pk

    def describe_current(self) -> None:
        current = Order.all_tenants.get(pk=self.order_id)
        moves = allowed_moves(current)
        self.detail = f"{self.detail} {conflict_hint(current.status, moves)}"
        self.extra.update(
            order_status=current.status, allowed_moves=[move.as_hint() for move in moves]
        )


class LostRace(StatusConflict):
    """Another move of the order committed between this one's read and its update: nothing
    was written, and :func:`rerun_lost_races` runs the request again."""


def rerun_lost_races(service: Callable[P, R]) -> Callable[P, R]:
    """Run ``service`` again, on the order as it is now, when its move lost a race
    (:class:`LostRace`), up to :data:`RACE_ATTEMPTS` times in all; after that the 409 stands.

    A lost race said nothing about the request: a diner's cancel that met a pay committing
    first was refused "changed concurrently" although the order could be cancelled from where
    the pay left it, and the refusal, kept under the request's key, was replayed to every
    retry for the record's lifetime. Run again, the request is decided on the status the
    other move left, allowed or refused for it (a refusal that then stands).

    ``service`` must hold its writes in a transaction of its own (a savepoint within the
    caller's) whose move comes before any other side effect, so a lost race leaves nothing to
    undo: its provider calls and outbox events follow the move."""

    @wraps(service)
    def rerun(*args: P.args, **kwargs: P.kwargs) -> R:
        for _ in range(RACE_ATTEMPTS - 1):
            try:
                return service(*args, **kwargs)
            except LostRace:
                continue
        return service(*args, **kwargs)

    return rerun


@contextmanager
def described_conflicts() -> Iterator[None]:
    """Wrap a service's transaction: a :class:`StatusConflict` leaving it is described with the
    order's committed status. It must be read after the transaction ended: a lost race leaves
    the transaction unusable (the failed conditional update aborts it), and the instance holds
    the status it failed to save."""
    try:
        yield
    except StatusConflict as conflict:
        conflict.describe_current()
        raise


def _conflict(
    order: Order, reason: str, *, kind: type[StatusConflict] = StatusConflict
) -> StatusConflict:
    fsm_conflicts.labels(tenant=str(order.tenant_id)).inc()
    return kind(order, reason)


def _move_words(move: Callable[[], None]) -> str:
    """A move as the API and the dashboard name it to people: by the status it leads to ("A
    move to ACCEPTED"), not by the model's method (``accept``, ``request_cancel``). Each of the
    order's moves leads to one status, whatever it starts from."""
    transition = next(iter(move._django_fsm.transitions.values()))  # type: ignore[attr-defined]
    return f"A move to {transition.target}"


def apply_transition(
    order: Order, move: Callable[[], None], *, actor: str, refusal: str | None = None
) -> OrderTransition:
    """Run one FSM move on ``order`` and persist it; the caller holds the transaction.

    The move checks its source status and conditions once, as it runs (a condition such as
    "no payment attached" can turn false between a separate check and the move when another
    transaction commits in between). ``refusal`` is what a refused move tells the client when
    the caller knows why better than "not allowed from <status>" (a condition failed)."""
    from_status = order.status
    try:
        move()
    except TransitionNotAllowed:
        reason = refusal or f"{_move_words(move)} is not allowed from {from_status}."
        raise _conflict(order, reason) from None
    try:
        _save_move(order, from_status)
    except ConcurrentTransition:
        raise _conflict(order, "The order changed concurrently.", kind=LostRace) from None
    logged = OrderTransition(
        tenant=order.tenant,
        order=order,
        from_status=from_status,
        to_status=order.status,
        actor=actor,
    )
    insert_together([logged])  # its INSERT compiled once per process (one_statement.py)
    return logged


# the text of a move's UPDATE, per database alias (quoting is the database's)
_MOVE_UPDATES: dict[str, str] = {}
# What an erasure of the order's diner rewrites (ordering/privacy/diners.py) and an answer
# shows: the move's UPDATE returns them as the row holds them when the move is written.
_ERASABLE = ("diner_id", "note", "contact_phone", "delivery_address")


def _save_move(order: Order, from_status: str) -> None:
    """Write ``order``'s move: its status and ``updated_at``, on condition that the status is
    still ``from_status``; :class:`ConcurrentTransition` when another transaction moved the
    order first (nothing written).

    What ``order.save(update_fields=["status", "updated_at"])`` does through django-fsm's
    ConcurrentTransitionMixin, in one ``UPDATE`` whose text is built once per process: the
    ORM built that query afresh for every move, and building it cost the worker more than
    PostgreSQL's running it. No ``save()`` signals are sent (none are connected to orders).

    The same statement returns the diner's fields as the row holds them now and puts them on
    ``order``: an erasure of the diner that committed after the move read the order (the
    move's update waited for it) had renamed the row, and the answer rendered from the order
    as read, kept as the reply the caller's key replays, showed the erased diner's id and
    note after the erasure had removed every reply showing them (a merchant's key is no
    session the erasure ends)."""
    using = router.db_for_write(Order)
    connection = connections[using]
    opts = Order._meta
    status, updated_at = opts.get_field("status"), opts.get_field("updated_at")
    erasable = [opts.get_field(name) for name in _ERASABLE]
    sql = _MOVE_UPDATES.get(using)
    if sql is None:
        name = connection.ops.quote_name
        sql = (
            f"UPDATE {name(opts.db_table)} SET {name(status.column)} = %s, "
            f"{name(updated_at.column)} = %s "
            f"WHERE {name(opts.pk.column)} = %s AND {name(status.column)} = %s "
            f"RETURNING {', '.join(name(field.column) for field in erasable)}"
        )
        _MOVE_UPDATES[using] = sql
    params = [
        status.get_db_prep_save(order.status, connection),
        updated_at.get_db_prep_save(updated_at.pre_save(order, add=False), connection),
        order.pk,
        from_status,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        now = cursor.fetchone()
    if now is None:
        raise ConcurrentTransition("The order's status changed since it was read.")
    for field, value in zip(erasable, now, strict=True):
        setattr(order, field.attname, value)
    order._update_initial_state()  # as the mixin's save() does: the next move starts here


def transition_order(*, tenant: Tenant, order_id: int, target: str, actor: str) -> Order:
    """A merchant-side move to ``target`` (one of :data:`MERCHANT_TARGETS`)."""
    if target == S.CANCELLED:
        return cancel_order(tenant=tenant, order_id=order_id, actor=actor)
    if target not in MERCHANT_MOVES:
        raise OrderingError(
            OrderingErrorCode.INVALID_TRANSITION_TARGET,
            f"'to' must be one of {', '.join(MERCHANT_TARGETS)}",
        )
    return _merchant_move(tenant=tenant, order_id=order_id, target=target, actor=actor)


@rerun_lost_races
def _merchant_move(*, tenant: Tenant, order_id: int, target: str, actor: str) -> Order:
    with described_conflicts(), transaction.atomic():
        order = access_order(tenant=tenant, order_id=order_id)
        apply_transition(order, MERCHANT_MOVES[target](order), actor=actor)
    return order


@rerun_lost_races
def cancel_order(
    *, tenant: Tenant, order_id: int, actor: str, diner_id: str | None = None
) -> Order:
    """Cancel: unpaid orders end CANCELLED now (stock, coupon and pending payment returned in
    the same transaction); paid ones go to CANCELLING, with the ``order.cancel_requested``
    outbox event that runs the refund saga, in the same transaction."""
    with described_conflicts(), transaction.atomic():
        # its lines and payments read with it: an unpaid cancel gives the lines' portions back
        # and voids a pending payment
        order = access_paying_order(
            tenant=tenant, order_id=order_id, diner_id=diner_id, related=("lines", "payments")
        )
        if can_proceed(order.cancel_unpaid):
            cancel_unpaid(order, actor=actor)
        else:
            move = apply_transition(order, order.request_cancel, actor=actor)
            emit_event(
                order=order,
                event_type=EventType.CANCEL_REQUESTED,
                payload={"actor": actor, "from_status": move.from_status},
            )
    return order


def expire_unpaid_order(
    *,
    tenant: Tenant,
    order_id: int,
    pending_started_before: datetime | None = None,
    declined_before: datetime | None = None,
) -> bool:
    """Cancel an order left unpaid, as the diner could: still CREATED, or PAYING with every
    payment declined (with ``declined_before``: the last before then, read under the order's
    lock, so a diner declined again since the expiry listed the order may still pay), or (with
    ``pending_started_before``) PAYING with its one pending payment
    started before then and already asked about at the provider, which had nothing settled.
    Its portions and coupon go back, and a pending payment is voided: should the provider take
    it after all, the platform refunds it (:mod:`ordering.payments.capture_refunds`). False,
    with nothing changed, when it is none of these any more, a pay or a callback that
    committed first included (the move's conditional update refuses then)."""
    try:
        with described_conflicts(), transaction.atomic():
            order = access_paying_order(
                tenant=tenant, order_id=order_id, related=("lines", "payments")
            )
            if order.status != S.CREATED and not _left_unpaid(
                order, pending_started_before, declined_before
            ):
                return False
            cancel_unpaid(order, actor=EXPIRY_ACTOR)
    except OrderingError:  # moved meanwhile (409), or gone (offboarded: 404)
        return False
    return True


def _left_unpaid(
    order: Order, pending_started_before: datetime | None, declined_before: datetime | None
) -> bool:
    """PAYING, every payment declined (before ``declined_before``, when given) but perhaps one
    pending, started before ``pending_started_before`` (None: none may be pending) and answered
    by the provider since (reconciliation's ``checked_at``)."""
    if order.status != S.PAYING:
        return False
    payments = list(order.payments.all())
    pending = [p for p in payments if p.status == Payment.Status.PENDING]
    if any(p.status not in (Payment.Status.FAILED, Payment.Status.PENDING) for p in payments):
        return False
    if not pending:
        return bool(payments) and (
            declined_before is None or all(p.updated_at < declined_before for p in payments)
        )
    return pending_started_before is not None and all(
        p.created_at < pending_started_before and p.checked_at is not None for p in pending
    )


def access_paying_order(
    *, tenant: Tenant, order_id: int, diner_id: str | None = None, related: Sequence[str] = ()
) -> Order:
    """The order as :func:`access_order` reads it, for a move that reads its payments; when it
    is PAYING, read again under its row's lock, taken first.

    Paying again (``pay_again``) leaves the order PAYING, so a move's conditional update
    (``WHERE status = 'PAYING'``) cannot tell that a payment was added meanwhile: a cancel or
    an expiry at the same instant as a pay-again both committed, and the order ended CANCELLED
    with the new payment still pending. Every writer of a PAYING order's payments (the pay,
    the cancel, the expiry, a provider's callback) takes the order's row lock first, so they
    take turns, and each reads the payments as the one before it committed them."""
    order = access_order(tenant=tenant, order_id=order_id, diner_id=diner_id, related=related)
    if order.status != S.PAYING:
        return order
    Order.all_tenants.select_for_update().filter(pk=order.pk).values_list("pk").get()
    return access_order(tenant=tenant, order_id=order_id, diner_id=diner_id, related=related)


def cancel_unpaid(order: Order, *, actor: str) -> None:
    """CREATED or PAYING -> CANCELLED with everything the order held given back (its pending
    payments voided), in the caller's transaction, the order locked by it."""
    apply_transition(order, order.cancel_unpaid, actor=actor)
    return_stock(order)
    return_coupon(order)
    _void_pending_payment(order)


def _void_pending_payment(order: Order) -> None:
    """Void the payments of ``order`` that were pending when read with it (an order in CREATED
    has none: nothing is sent).

    None can turn pending after that read without the cancel failing: a payment is attached,
    pending, by the pay move out of CREATED, which the cancel's conditional update from the
    status read refuses once it committed, or by paying again, which takes the PAYING order's
    row lock the cancel read it under (:func:`access_paying_order`); no payment goes back to
    pending. The update is still conditional on the status, as a callback may have settled it
    since. The payments held are dropped afterwards, so that a later read sees the database."""
    pending = [p.pk for p in order.payments.all() if p.status == Payment.Status.PENDING]
    if pending:
        Payment.objects.for_tenant(order.tenant).filter(
            pk__in=pending, status=Payment.Status.PENDING
        ).update(status=Payment.Status.VOIDED)
    getattr(order, "_prefetched_objects_cache", {}).pop("payments", None)  # if read with it


def return_stock(order: Order) -> None:
    """Put the order's portions back on the menu (the caller holds the transaction and makes
    sure it runs once per order: the unpaid cancel's move, or the saga's compensation row):
    its lines (those the order holds, else read), then every dish in one statement
    (:func:`ordering.services.stock.give_back`)."""
    quantities: dict[int, int] = {}
    for line in order.lines.all():
        quantities[line.dish_id] = quantities.get(line.dish_id, 0) + line.quantity
    give_back(tenant=order.tenant, quantities=quantities)


def return_coupon(order: Order) -> None:
    """Give the order's coupon use back (same once-only contract as :func:`return_stock`)."""
    if order.coupon_id:
        Coupon.objects.for_tenant(order.tenant).filter(pk=order.coupon_id, used_count__gt=0).update(
            used_count=F("used_count") - 1
        )
