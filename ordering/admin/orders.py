"""Staff admin for orders (moved only through the lifecycle services), menus and coupons.

Staff never edit an order's money or status fields by hand: status changes go through the same
services as the API and the dashboard (one conditional update each, logged with actor
``staff:<username>``), and amounts are read-only: an order's page is a view, its moves are the
list's actions.

What a diner wrote on an order (the note, the phone number, the delivery address) is shown
only to staff with the ``ordering.view_diner_details`` permission, and each such view is written
to the staff access log, as a stored reply body is (``idempotency.admin.audits``); the
lifecycle, the money and the lines need none of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import DatabaseError
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from config.admin_saves import SavesChangedFieldsOnly
from idempotency.admin.audits import LogsPersonalDataViews
from idempotency.admin.distinct import fixed_values_filter
from idempotency.admin.paging import BoundedCountList, IndexSortedChangeList
from idempotency.models import StaffAccessLog
from ordering.actors import describe_actors
from ordering.errors import OrderingError
from ordering.models import Coupon, Dish, Order, OrderLine, OrderStatus, OrderTransition, Payment
from ordering.services.lifecycle import transition_order
from ordering.services.placing import PAYMENT_METHODS
from ordering.shown_names import shown_name
from tenants.models import Tenant
from tenants.write_fence import refused_by_fence

S = OrderStatus
# What a diner wrote on an order, by field and label
DINER_DETAILS = {"note": "note", "contact_phone": "phone", "delivery_address": "address"}
HIDDEN_DINER_DETAILS = "(hidden: seeing them needs the “view diner details” permission)"
MAX_ORDER_ID = 2**63 - 1  # ids are PostgreSQL bigints
# a provider's reference names one payment per restaurant: this many orders at most
MAX_ORDERS_BY_REFERENCE = 100


def may_see_diner_details(request: HttpRequest) -> bool:
    return request.user.has_perm("ordering.view_diner_details")


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class OrderLineInline(ReadOnlyInline):
    model = OrderLine
    fields = ["dish_name", "unit_price", "quantity", "line_total"]


class PaymentInline(ReadOnlyInline):
    model = Payment
    fields = ["provider", "provider_txn_id", "method", "amount", "currency", "status", "created_at"]


class OrderTransitionInline(ReadOnlyInline):
    model = OrderTransition
    fields = ["at", "from_status", "to_status", "who", "actor"]
    verbose_name_plural = "transition log"

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "who"]

    @admin.display(description="who")
    def who(self, transition: OrderTransition) -> str:
        actor = transition.actor
        return describe_actors(transition.tenant, [actor], staff_names=True)[actor]


def _move_action(target: str, label: str) -> Callable[..., None]:
    """An admin action moving each selected order to ``target`` through the lifecycle service.

    Orders already where the move goes (a double click sends the action twice) are reported as
    already done. Orders that do not allow the move (or lost a race) are reported and left as
    they were, as are those of a restaurant being offboarded (its rows are fenced,
    :mod:`tenants.write_fence`): one of them among the selected answered 500, with the orders
    before it moved and no word of them.
    """

    arrived = (S.CANCELLING, S.CANCELLED) if target == S.CANCELLED else (target,)

    def action(modeladmin: OrderAdmin, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        actor = f"staff:{request.user.get_username()}"
        moved, already, refused = 0, [], []
        for order in queryset.select_related("tenant").order_by("pk"):
            try:
                transition_order(tenant=order.tenant, order_id=order.pk, target=target, actor=actor)
            except OrderingError as exc:
                # read again: a double click's first request may have moved it meanwhile
                if Order.all_tenants.filter(pk=order.pk, status__in=arrived).exists():
                    already.append(str(order.pk))
                else:
                    refused.append(f"{order.pk} ({exc.detail})")
            except DatabaseError as exc:
                if not refused_by_fence(exc):
                    raise
                refused.append(f"{order.pk} (its restaurant is being offboarded)")
            else:
                moved += 1
        if moved:
            modeladmin.message_user(request, f"{label}: {moved} order(s) moved.", messages.SUCCESS)
        if already:
            modeladmin.message_user(
                request, f"{label}: already done for {', '.join(already)}.", messages.INFO
            )
        if refused:
            modeladmin.message_user(
                request, f"{label}: not allowed for {'; '.join(refused)}", messages.WARNING
            )

    action.__name__ = f"move_to_{target.lower()}"
    # a cancel refunds a paid order: more than moving orders through the kitchen, as on the
    # dashboard, where cancelling needs a manager
    needs = "cancel" if target == S.CANCELLED else "change"
    return admin.action(description=f"{label} selected orders", permissions=[needs])(action)


@admin.register(Order)
class OrderAdmin(BoundedCountList, LogsPersonalDataViews, admin.ModelAdmin):
    list_display = ["number", "id", "tenant", "status", "amount", "created_at"]
    # the payment methods the API takes (the column has no index: the values the orders hold
    # were a read of every order)
    list_filter = [
        "status",
        "tenant",
        ("payment_method", fixed_values_filter(PAYMENT_METHODS)),
        "created_at",
    ]
    list_select_related = ["tenant"]
    search_fields = ["=id", "=diner_id", "=idempotency_key"]  # see get_search_results
    # the key a client sent is not an order's: orders keep a hash of it with its restaurant,
    # diner and endpoint; the records and the duplicate audits are searched by the key itself
    search_help_text = (
        "An order id, a diner id, the idempotency key hash an order's page shows (64 hex "
        "characters) or a payment's provider reference (exactly). For the key a client sent, "
        "search the idempotency records or the duplicate audits."
    )
    # by the columns an index serves in their order: a sort by number, restaurant, status or
    # total sorted every order of every restaurant on each page view
    sortable_by = ["id", "created_at"]
    date_hierarchy = "created_at"
    inlines = [OrderLineInline, PaymentInline, OrderTransitionInline]
    access_action = StaffAccessLog.Action.VIEW_PERSONAL_DATA
    actions = [
        _move_action(S.ACCEPTED, "Accept"),
        _move_action(S.PREPARING, "Start preparing"),
        _move_action(S.READY, "Mark ready"),
        _move_action(S.DELIVERING, "Dispatch"),
        _move_action(S.COMPLETED, "Complete"),
        _move_action(S.CANCELLED, "Cancel (refund if paid)"),
    ]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return IndexSortedChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Order], search_term: str
    ) -> tuple[QuerySet[Order], bool]:
        """An order by its id, its diner's id, its idempotency key or the provider's reference
        of one of its payments (the transaction a diner's bank statement names), each compared
        exactly, through its index. Django's "=field" compares ``UPPER(column::text)``, which
        no index holds: every search read every order. A key and a reference are found
        through the unique indexes that lead with the restaurant (one probe per restaurant and
        provider), and ids, diners' ids, keys and references are told apart by case, as the
        engine tells keys apart."""
        term = search_term.strip()
        if not term:
            return queryset, False
        tenants = list(Tenant.objects.values_list("pk", flat=True))
        paid_by = Payment.all_tenants.filter(
            tenant_id__in=tenants,
            provider__in=list(settings.PAYMENT_PROVIDERS),
            provider_txn_id=term,
        ).values_list("order_id", flat=True)
        # the ids read first, so the OR compares orders by their primary key
        found = (
            Q(diner_id=term)
            | Q(tenant_id__in=tenants, idempotency_key=term)
            | Q(pk__in=list(paid_by[:MAX_ORDERS_BY_REFERENCE]))
        )
        if term.isascii() and term.isdigit() and int(term) <= MAX_ORDER_ID:
            found |= Q(pk=int(term))
        return queryset.filter(found), False

    def get_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return self.get_readonly_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        shown = [f.name for f in Order._meta.fields if f.name not in DINER_DETAILS]
        details = "diner_details" if may_see_diner_details(request) else "diner_details_hidden"
        return [*shown, details]

    def shows_personal_data(self, request: HttpRequest) -> bool:
        return may_see_diner_details(request)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """ "Cancel (refund if paid)" moves money back: it needs ``ordering.cancel_order``, not
        "change" on orders, which staff need to move orders through the kitchen."""
        return request.user.has_perm("ordering.cancel_order")

    def has_erase_diners_permission(self, request: HttpRequest) -> bool:
        """The order list's "Erase the diners…" (``ordering/admin/privacy.py``) needs the
        permission to log an erasure: erasing cannot be undone, and "change" on orders, which
        staff need to move them through the kitchen, let anyone who moves orders erase their
        diners."""
        return request.user.has_perm("ordering.add_dinererasure")

    @admin.display(description="what the diner wrote")
    def diner_details(self, order: Order) -> str:
        return format_html_join(
            "\n",
            "<div>{}: <bdi>{}</bdi></div>",
            ((label, getattr(order, field) or "-") for field, label in DINER_DETAILS.items()),
        )

    @admin.display(description="what the diner wrote")
    def diner_details_hidden(self, order: Order) -> str:
        return HIDDEN_DINER_DETAILS

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        """The list's actions (the lifecycle moves) need "change"; an order's own page changes
        nothing, so it opens as "View order", without Save buttons."""
        return obj is None and super().has_change_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # orders are placed by diners through the API

    @admin.display(description="number", ordering="number")
    def number(self, order: Order) -> str:
        return order.number_label

    @admin.display(description="total", ordering="total")
    def amount(self, order: Order) -> str:
        return f"{order.total} {order.currency}"

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # the transition log and payments must outlive nothing


class DishForm(forms.ModelForm):
    """Staff editing a dish name it as the dashboard does: readable as stored."""

    class Meta:
        model = Dish
        fields = ["name", "description", "price", "active"]

    def clean_name(self) -> str:
        return shown_name(self.cleaned_data["name"])


@admin.register(Dish)
class DishAdmin(SavesChangedFieldsOnly):
    form = DishForm
    list_display = ["name", "tenant", "price", "stock", "active"]
    list_filter = ["active", "tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__slug"]
    readonly_fields = ["tenant", "stock"]  # stock moves with orders; merchants edit it safely

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # merchants add dishes in the dashboard


@admin.register(Coupon)
class CouponAdmin(SavesChangedFieldsOnly):
    list_display = ["code", "tenant", "kind", "value", "used_count", "max_uses", "active"]
    list_filter = ["active", "kind", "tenant"]
    list_select_related = ["tenant"]
    search_fields = ["code", "tenant__slug"]
    # the code as the dashboard wrote it, in capitals: diners' codes are read in capitals
    # (ordering/services/placing.py), so a code edited here into lower case could not be used
    readonly_fields = ["tenant", "code", "used_count"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # merchants add coupons in the dashboard
