"""The orders board (refreshing itself) and the order page with its allowed moves."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.db import router
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import get_template
from django.urls import reverse
from django.utils import timezone
from django.utils.http import quote_etag
from django.views.decorators.http import etag, require_POST, require_safe

from idempotency.audit import AuditEvent
from idempotency.core.hashing import keyed_digest
from idempotency.reports import has_committed_result
from idempotency.stores.audit_stream import report
from idempotency.web.forms import idempotent_form
from idempotency.web.http import request_meta
from ordering.actors import describe_actors
from ordering.background.dead_letters import open_dead_letters
from ordering.dashboard.access import (
    actor_of,
    forbidden,
    found,
    may_reach,
    member_required,
    render_page,
    tenant_of,
)
from ordering.dashboard.forms import TransitionForm
from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Compensation, Order, OrderStatus, Payment, ProviderConflict
from ordering.models.payments import payment_of_record
from ordering.payments.capture_refunds import refunds_running
from ordering.payments.conflicts import open_conflicts
from ordering.selectors import (
    BoardCard,
    board_cards,
    board_version,
    one_moment,
    order_for_dashboard,
)
from ordering.services.lifecycle import MERCHANT_MOVES, transition_order
from tenants.models import Tenant
from tenants.permissions import Area

S = OrderStatus
# The FSM methods behind "cancel" (cancel_order picks the one that applies); finish_cancel,
# mark_paid and start_payment belong to the saga, the provider and the diner, not to merchants.
CANCEL_METHODS = ("cancel_unpaid", "request_cancel")
MOVE_LABELS = {
    S.ACCEPTED: "Accept",
    S.PREPARING: "Start preparing",
    S.READY: "Mark ready",
    S.DELIVERING: "Out for delivery",
    S.COMPLETED: "Mark delivered",
    S.CANCELLED: "Cancel order",
}
# Where a move has arrived, for a page that asks for it again (a tab left open, a colleague):
# "Cancel order" ends a paid order in CANCELLING, then CANCELLED once refunded
_ARRIVED = {S.CANCELLED: (S.CANCELLING, S.CANCELLED)}
BOARD_COLUMNS = "dashboard/partials/board_columns.html"
# Whose columns a board fragment holds (the page's script compares it with its own)
RESTAURANT_HEADER = "X-Restaurant"


@dataclass(frozen=True)
class Move:
    target: str
    label: str

    @property
    def is_cancel(self) -> bool:
        return self.target == S.CANCELLED


def merchant_moves(order: Order, *, may_cancel: bool = True) -> list[Move]:
    """The merchant moves allowed from the order's status right now, per the FSM itself
    (sources and conditions), in lifecycle order with cancel last (left out for a role that
    may not cancel)."""
    targets: list[str] = []
    for transition in order.get_available_status_transitions():
        move = MERCHANT_MOVES.get(transition.target)
        if move is not None and move(order).__name__ == transition.name:
            targets.append(transition.target)
        elif transition.name in CANCEL_METHODS and S.CANCELLED not in targets:
            targets.append(S.CANCELLED)
    targets.sort(key=lambda t: t == S.CANCELLED)
    return [Move(target=t, label=MOVE_LABELS[t]) for t in targets if may_cancel or t != S.CANCELLED]


def board_context(request: HttpRequest) -> dict[str, object]:
    """The board's columns (every status, in lifecycle order) and the time the cards' ages
    are counted to."""
    columns: dict[str, list[BoardCard]] = {status: [] for status in S.values}
    for card in board_cards(tenant=tenant_of(request)):
        columns[card.status].append(card)
    return {"columns": columns, "now": timezone.now()}


def board_etag(request: HttpRequest) -> str:
    """The ETag of the board's columns: the cards' version (:func:`board_version`), the
    tenant, the time zone the cards' times are written in and the columns' template as
    deployed. The cards' ages are not in it: the page's script keeps them up to date.

    It is worked out before the columns are read: a change in between gives an answer newer
    than its tag, and the next poll fetches the columns again; never an older one.
    """
    tenant = tenant_of(request)
    parts = (
        board_version(tenant=tenant),
        str(tenant.pk),
        timezone.get_current_timezone_name(),
        get_template(BOARD_COLUMNS).template.source,
    )
    return quote_etag(hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest())


@member_required(Area.ORDERS)
@require_safe
def board(request: HttpRequest) -> HttpResponse:
    """The board; a small script swaps in :func:`board_fragment` every few seconds. Above it,
    the restaurant's payments that platform staff are reviewing (open provider conflicts):
    staff resolve them in the admin, the merchant should know which orders they concern."""
    refresh = settings.DASHBOARD_REFRESH_SECONDS
    conflicts = open_conflicts(tenant=tenant_of(request)).select_related("order")
    version = board_etag(request)
    return render_page(
        request,
        "dashboard/board.html",
        {
            **board_context(request),
            "board_version": version,
            "refresh_ms": int(refresh * 1000),
            "payments_under_review": list(conflicts.order_by("created_at")),
        },
        section="orders",
    )


@member_required(Area.ORDERS)
@require_safe
@etag(board_etag)
def board_fragment(request: HttpRequest) -> HttpResponse:
    """The board's columns, for the page's script every few seconds. The script sends the
    ETag of the columns it shows (``If-None-Match``); while no card has changed the answer is
    304, after one read of the cards' columns (:func:`board_etag`) and without rendering.

    The columns are the current restaurant's, the session's choice: after a switch in
    another tab they are another restaurant's than the page around them names. The answer
    says whose they are (``X-Restaurant``), and the script reloads the whole page then."""
    response = render(request, BOARD_COLUMNS, board_context(request))
    response["Cache-Control"] = "no-store"
    response[RESTAURANT_HEADER] = str(tenant_of(request).pk)
    return response


@member_required(Area.ORDERS)
@require_safe
def order_detail(request: HttpRequest, order_id: int) -> HttpResponse:
    tenant = tenant_of(request)
    with one_moment(router.db_for_read(Order)):  # its status, payments and log agree
        order = found(order_for_dashboard(tenant=tenant, order_id=order_id))
        transitions = list(order.transitions.all())
        payments = _payments_shown(list(order.payments.all()))
        under_review = _under_review(tenant, order)
        cancel_stopped = _cancel_stopped(order)
    who = describe_actors(tenant, (t.actor for t in transitions))
    return render_page(
        request,
        "dashboard/order_detail.html",
        {
            "order": order,
            "moves": merchant_moves(order, may_cancel=may_reach(request, Area.CANCEL_ORDERS)),
            "payments": payments,
            "transitions": transitions,
            "log": [(t, who[t.actor]) for t in transitions],
            "payments_under_review": under_review,
            "cancel_stopped": cancel_stopped,
        },
        section="orders",
    )


# what each step of the cancel saga does, as the restaurant reads it
_CANCEL_STEP_WORDS = {
    Compensation.Step.RESTORE_STOCK: "returning the portions to the menu",
    Compensation.Step.RETURN_COUPON: "giving the coupon use back",
    Compensation.Step.CANCEL_DELIVERY: "standing the courier down",
    Compensation.Step.REFUND_PAYMENT: "the refund to the diner",
}


def _cancel_stopped(order: Order) -> str:
    """For a CANCELLING order whose cancel stopped at a step that failed past its retries,
    which step and who acts now ("" otherwise): such an order stays CANCELLING, and its page
    said "refund in progress" while its dead letter waited for platform staff, and for good
    once staff had settled it by hand (discarded the letter)."""
    if order.status != OrderStatus.CANCELLING:
        return ""
    failed = (
        Compensation.all_tenants.filter(
            order=order, step__in=_CANCEL_STEP_WORDS, status=Compensation.Status.FAILED
        )
        .values_list("step", flat=True)
        .first()
    )
    if failed is None:
        return ""
    waiting = open_dead_letters().filter(order=order).exists()
    who = "platform staff will see to it" if waiting else "platform staff settled it by hand"
    return f"{_CANCEL_STEP_WORDS[failed]} failed: {who}"


def _under_review(tenant: Tenant, order: Order) -> list[ProviderConflict]:
    """The order's open conflicts, each marked ``platform_refunding`` while the platform's
    refund of it is to run or running; else staff are the ones to refund or confirm it."""
    conflicts = list(open_conflicts(tenant=tenant).filter(order=order))
    running = refunds_running(payment_ids=[c.payment_id for c in conflicts if c.payment_id])
    for conflict in conflicts:
        conflict.platform_refunding = conflict.payment_id in running
    return conflicts


def _payments_shown(payments: list[Payment]) -> list[Payment]:
    """The order's payments, the one that took its money first (the one the API's answer
    shows, :func:`payment_of_record`): a payment taken twice and refunded by the platform
    is newer, and listed first it read as the order's money refunded."""
    paid_by = payment_of_record(payments)
    return sorted(payments, key=lambda payment: payment is not paid_by)


@member_required(Area.ORDERS)
@require_POST
def order_transition(request: HttpRequest, order_id: int) -> HttpResponse:
    """One merchant move; cancelling (which refunds a paid order) needs a role that reaches
    ``Area.CANCEL_ORDERS``, checked before the move's idempotency key is claimed."""
    if request.POST.get("to") == S.CANCELLED and not may_reach(request, Area.CANCEL_ORDERS):
        return forbidden(request, Area.CANCEL_ORDERS)
    return _apply_move(request, order_id)


@idempotent_form(
    fields=("to",),
    form_page=lambda request, order_id: reverse("dash-order", kwargs={"order_id": order_id}),
)
def _apply_move(request: HttpRequest, order_id: int) -> HttpResponse:
    """A double click replays the first answer (a redirect) with a notice; a move the order
    no longer allows (another tab, a colleague) is refused with a message and recorded as a
    CONFLICT audit. When the order is where the move goes already (the same move, made from
    another tab), the message says so: "not allowed" read as if the move had failed."""
    tenant = tenant_of(request)
    order = found(order_for_dashboard(tenant=tenant, order_id=order_id))
    back = redirect("dash-order", order_id=order.pk)
    form = TransitionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Unknown move.")
        return back
    try:
        moved = transition_order(
            tenant=tenant,
            order_id=order.pk,
            target=form.cleaned_data["to"],
            actor=actor_of(request),
        )
    except OrderingError as exc:
        scoped = getattr(request, "idempotency", None)
        if scoped is not None and has_committed_result(scoped):
            return back  # lost to its own duplicate: the engine replays the winner's answer
        if exc.error_code == OrderingErrorCode.ORDER_STATUS_CONFLICT:
            _audit_conflict(request, order)
            now = found(order_for_dashboard(tenant=tenant, order_id=order.pk))
            if now.status in _ARRIVED.get(form.cleaned_data["to"], (form.cleaned_data["to"],)):
                messages.info(
                    request,
                    f"Order {now.number_label} is {now.status} already (moved in another tab, "
                    "or by a colleague); nothing more was done.",
                )
                return back
        messages.error(request, f"Not applied: {exc.detail}")
        return back
    messages.success(request, f"Order {moved.number_label} is now {moved.status}.")
    return back


def _audit_conflict(request: HttpRequest, order: Order) -> None:
    """A cross-state duplicate (the move was already made elsewhere) is a duplicate for review
    like a replay is; the engine cannot see it because each tab carried its own key."""
    scoped = getattr(request, "idempotency", None)
    if scoped is None:
        return
    report(
        AuditEvent(
            tenant_key=scoped.tenant,
            endpoint=f"{scoped.method} {scoped.route}",
            key=keyed_digest(scoped.key),
            outcome="CONFLICT",
            source="database",
            principal=scoped.principal,
            request_meta=request_meta(request),
            resource_ref=reverse("dash-order", kwargs={"order_id": order.pk}),
        ),
        in_transaction=True,
    )
