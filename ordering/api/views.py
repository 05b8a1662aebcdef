"""HTTP glue of the ordering API: validate, call one service, shape the answer.

Each view declares the capability its methods need (``tenants.permissions``); the diner whose
orders a call sees is the session's (``principal.diner_id``; None for a merchant key, which
sees the tenant's orders).
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, router
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from config.api_errors import ApiError
from idempotency.web.drf import idempotent
from idempotency.web.openapi import (
    IDEMPOTENCY_KEY_REQUIRED,
    answer_headers,
    idempotency_key_optional,
    problems,
)
from idempotency.web.throttle import TenantRateThrottle
from ordering.api.rendering import menu_entry, shown_order
from ordering.api.serializers import (
    DishSerializer,
    OrderDetailSerializer,
    PaginatedOrdersSerializer,
    PlaceOrderInSerializer,
    TransitionInSerializer,
)
from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError
from ordering.models import Order, OrderStatus
from ordering.order_cursor import Cursor
from ordering.order_list import read_page
from ordering.prefetch import read_related
from ordering.selectors import access_order, menu_rows, one_moment
from ordering.services.lifecycle import cancel_order, transition_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from tenants.permissions import Capability
from tenants.principals import ApiPrincipal

# Pay, cancel and merchant moves absorb keyless double submits for this long (seconds): the
# engine's automatic-key window, IDEMPOTENCY_AUTO_KEY_WINDOW (60 by default)
AUTO_KEY_WINDOW: int = settings.IDEMPOTENCY["AUTO_KEY_WINDOW_SECONDS"]
# An order id is a positive 64-bit integer, past JavaScript's exact 2**53: the answers write it
# as a string, and the path declares it as those digits, so a client generated from the schema
# (TypeScript's ``number`` for an integer) never rounds it to another order's id.
ORDER_ID = OpenApiParameter(
    "order_id",
    {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
    OpenApiParameter.PATH,
)
# Personal data in an order's answer: never kept in a stored reply (docs/data-protection.md).
# Every order write answers the order, so each of them redacts it; a tenant may add paths.
ORDER_PERSONAL_PATHS = ("contact.phone", "contact.address")
# Every authenticated call may meet these; writes also the body and rate-limit refusals.
READ_ERRORS = (400, 401, 403, 404)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 415, 422, 429)
# what an order's detail shows besides the order (ordering/api/rendering.py)
ORDER_RELATIONS = ("lines", "payments", "transitions")


def order_detail(principal: ApiPrincipal, order_id: int) -> dict:
    order = access_order(
        tenant=principal.tenant,
        order_id=order_id,
        diner_id=principal.diner_id,
        related=ORDER_RELATIONS,
    )
    return shown_order(principal, order)


def moved_order(principal: ApiPrincipal, order: Order) -> dict:
    """``order`` as its detail shows it, with its lines, payments and log read once. The answer
    of a move (pay, cancel, a merchant's move) is the order the service saved, which it holds
    as the database does: reading the order again would cost a query for what is in hand."""
    return shown_order(principal, read_related(order, *ORDER_RELATIONS))


class MenuView(APIView):
    capabilities = {"GET": Capability.READ_MENU}

    @extend_schema(
        operation_id="v1_menu_list",
        responses={200: DishSerializer(many=True), **problems(401, 403)},
    )
    def get(self, request: Request) -> Response:
        """The tenant's active dishes."""
        return Response([menu_entry(row) for row in menu_rows(tenant=request.user.tenant)])


def already_placed(request: Request) -> OrderingError | None:
    """409 ``ORDER_ALREADY_PLACED`` naming the order this request's key placed, if one did."""
    placed = (
        Order.all_tenants.filter(
            tenant=request.user.tenant, idempotency_key=request.idempotency.business_key
        )
        .values_list("pk", flat=True)
        .first()
    )
    if placed is None:
        return None
    return OrderingError(
        OrderingErrorCode.ORDER_ALREADY_PLACED,
        f"This Idempotency-Key already placed order {placed}; its answer is no longer kept. "
        "GET the order.",
        order_id=str(placed),
        headers={"Location": f"/api/v1/orders/{placed}/"},
    )


def _recall_placed_order(view: APIView, request: Request) -> Response | None:
    """A pre-issued token Redis no longer knows, whose record is gone too, that placed an
    order: the order answers (409), not "take a new token" (422), which placed it again."""
    placed = already_placed(request)
    return None if placed is None else view.handle_exception(placed)


# Query parameters of paging by number (DRF's page-number and limit-offset paginators): the
# list pages by cursor only.
PAGING_BY_NUMBER = ("page", "page_size", "limit", "offset")


class OrderListCreateView(APIView):
    capabilities = {"GET": Capability.READ_ORDERS, "POST": Capability.PLACE_ORDER}
    throttle_classes = [TenantRateThrottle]  # writes only; reads pass

    @extend_schema(
        operation_id="v1_orders_list",  # a page of orders: drf-spectacular's guess was "retrieve"
        parameters=[
            OpenApiParameter(
                "status", str, enum=OrderStatus.values, description="Only orders in this status"
            ),
            OpenApiParameter(
                "cursor",
                {"type": "string", "maxLength": 56},
                description="Where the page starts: the cursor of an answer's next or previous "
                "link (opaque); leave it out for the newest orders. One not in the form those "
                "links give answers 400 CURSOR_INVALID; it names a place in the caller's own "
                "list, never a permission.",
            ),
        ],
        responses={200: PaginatedOrdersSerializer, **problems(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        """The caller's orders, newest first (a diner's own; a merchant key's, all of them), 20
        a page; ``?status=`` filters. Pages follow each other by cursor (the answer's ``next``
        and ``previous`` links), so orders placed or moved while a client scrolls neither
        repeat nor skip an order on the pages it reads next."""
        for name in ("status", "cursor"):
            if len(request.query_params.getlist(name)) > 1:
                # one is taken, the others silently dropped: a client filtering by two
                # statuses would read one status's orders as all of them
                raise ApiError(
                    status_code=400,
                    code="VALIDATION_ERROR",
                    detail=f"{name} may be given once",
                )
        counted = [name for name in PAGING_BY_NUMBER if name in request.query_params]
        if counted:
            # a client still counting pages (or rows) would read the first page again and
            # again, the parameter kept in every next link
            raise ApiError(
                status_code=400,
                code="VALIDATION_ERROR",
                detail=f"{counted[0]} is not taken: the list pages by cursor, 20 orders a "
                "page; follow the answer's next link",
            )
        wanted = request.query_params.get("status")
        if wanted is not None and wanted not in OrderStatus.values:
            raise ApiError(
                status_code=400,
                code="VALIDATION_ERROR",
                detail=f"status must be one of {', '.join(OrderStatus.values)}",
            )
        given = request.query_params.get("cursor")
        cursor = None if given is None else Cursor.decode(given)
        principal: ApiPrincipal = request.user
        with one_moment(router.db_for_read(Order)):  # the orders as one moment left them
            page = read_page(
                tenant=principal.tenant,
                diner_id=principal.diner_id,
                status=wanted,
                cursor=cursor,
            )
            shown = [shown_order(principal, order, detail=False) for order in page.orders]
        return Response(
            {
                "count": page.count,
                "next": _page_link(request, page.next),
                "previous": _page_link(request, page.previous),
                "results": shown,
            }
        )

    @extend_schema(
        request=PlaceOrderInSerializer,
        parameters=[
            IDEMPOTENCY_KEY_REQUIRED,
            *answer_headers(201),
            OpenApiParameter(
                "Location",
                # a path on this site, as HTTP allows (RFC 9110 10.2.2: a URI-reference), not
                # the absolute URI that format "uri" demands
                {"type": "string", "format": "uri-reference"},
                OpenApiParameter.HEADER,
                response=[201, 409],
                description="The order's URL (on 409 ORDER_ALREADY_PLACED, the order the key "
                "placed).",
            ),
        ],
        # 503: no order ID can be issued right now (ORDER_ID_UNAVAILABLE, with Retry-After).
        responses={
            201: OpenApiResponse(
                OrderDetailSerializer,
                description="The order, placed by this request (MISS) or by the first request "
                "with this key (HIT, the same bytes).",
            ),
            **problems(*WRITE_ERRORS, 503),
        },
    )
    @idempotent(
        required=True,
        fields=("items", "payment_method", "coupon_code", "note", "contact"),
        in_flight="wait",
        redact=ORDER_PERSONAL_PATHS,
        recall=_recall_placed_order,
    )
    def post(self, request: Request) -> Response:
        """Place an order. Prices come from the menu; stock and coupon are taken atomically."""
        data = PlaceOrderInSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        principal: ApiPrincipal = request.user
        contact = data.validated_data.get("contact") or {}
        order = place_order(
            tenant=principal.tenant,
            items=[ItemRequest(**item) for item in data.validated_data["items"]],
            payment_method=data.validated_data["payment_method"],
            coupon_code=data.validated_data.get("coupon_code") or None,
            note=data.validated_data["note"],
            contact_phone=contact.get("phone", ""),
            delivery_address=contact.get("address", ""),
            diner_id=principal.diner_id,
            client=principal.client,
            idempotency_key=request.idempotency.business_key if request.idempotency else None,
            actor=principal.actor,
        )
        # place_order hands back the order with its lines and log: nothing is read back.
        return Response(
            shown_order(principal, order),
            status=status.HTTP_201_CREATED,
            headers={"Location": f"/api/v1/orders/{order.pk}/"},
        )

    def handle_exception(self, exc: Exception) -> Response:
        """The key placed an order whose stored answer is gone (its record expired or was
        purged): the engine found nothing to replay and ran the view, whose order met the
        orders' own unique key. That order is the answer's subject, not a 500: 409
        ``ORDER_ALREADY_PLACED`` names it. Not replayed as if it were this request's result:
        without the record the payload cannot be compared. (An erasure clears its diner's
        orders' keys with the records: a key sent again after it places a new order.)"""
        if isinstance(exc, IntegrityError) and getattr(self.request, "idempotency", None):
            exc = already_placed(self.request) or exc
        return super().handle_exception(exc)


def _page_link(request: Request, cursor: Cursor | None) -> str | None:
    """The URL of the page at ``cursor``: this request's, its filter kept, the cursor set."""
    if cursor is None:
        return None
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor.encode())


class OrderDetailView(APIView):
    capabilities = {"GET": Capability.READ_ORDERS}

    @extend_schema(
        operation_id="v1_orders_detail",
        parameters=[ORDER_ID],
        responses={200: OrderDetailSerializer, **problems(*READ_ERRORS)},
    )
    def get(self, request: Request, order_id: int) -> Response:
        return Response(order_detail(request.user, order_id))


class OrderPayView(APIView):
    capabilities = {"POST": Capability.PAY_ORDER}
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="v1_orders_pay",
        parameters=[ORDER_ID, idempotency_key_optional(AUTO_KEY_WINDOW), *answer_headers(200)],
        request=None,
        responses={200: OrderDetailSerializer, **problems(*WRITE_ERRORS)},
    )
    @idempotent(fields=(), auto_key_window=AUTO_KEY_WINDOW, redact=ORDER_PERSONAL_PATHS)
    def post(self, request: Request, order_id: int) -> Response:
        """Start paying: CREATED -> PAYING with a new Payment; once every payment was
        declined, pay again with a new Idempotency-Key (the order stays PAYING). An order
        whose total is 0.00 needs no payment: it moves CREATED -> PAID at once, ``payment``
        null."""
        principal: ApiPrincipal = request.user
        order, _ = pay_order(
            tenant=principal.tenant,
            order_id=order_id,
            diner_id=principal.diner_id,
            actor=principal.actor,
        )
        return Response(moved_order(principal, order))


class OrderCancelView(APIView):
    capabilities = {"POST": Capability.CANCEL_ORDER}
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="v1_orders_cancel",
        parameters=[ORDER_ID, idempotency_key_optional(AUTO_KEY_WINDOW), *answer_headers(200)],
        request=None,
        responses={200: OrderDetailSerializer, **problems(*WRITE_ERRORS)},
    )
    @idempotent(fields=(), auto_key_window=AUTO_KEY_WINDOW, redact=ORDER_PERSONAL_PATHS)
    def post(self, request: Request, order_id: int) -> Response:
        """Cancel: unpaid orders end CANCELLED, paid ones go to CANCELLING (refund)."""
        principal: ApiPrincipal = request.user
        order = cancel_order(
            tenant=principal.tenant,
            order_id=order_id,
            diner_id=principal.diner_id,
            actor=principal.actor,
        )
        return Response(moved_order(principal, order))


class OrderTransitionView(APIView):
    capabilities = {"POST": Capability.MOVE_ORDERS}
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="v1_orders_transition",
        parameters=[ORDER_ID, idempotency_key_optional(AUTO_KEY_WINDOW), *answer_headers(200)],
        request=TransitionInSerializer,
        responses={200: OrderDetailSerializer, **problems(*WRITE_ERRORS)},
    )
    @idempotent(fields=("to",), auto_key_window=AUTO_KEY_WINDOW, redact=ORDER_PERSONAL_PATHS)
    def post(self, request: Request, order_id: int) -> Response:
        """Merchant-side move (ACCEPTED, PREPARING, READY, DELIVERING, COMPLETED, CANCELLED)."""
        data = TransitionInSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        principal: ApiPrincipal = request.user
        order = transition_order(
            tenant=principal.tenant,
            order_id=order_id,
            target=data.validated_data["to"],
            actor=principal.actor,
        )
        return Response(moved_order(principal, order))
