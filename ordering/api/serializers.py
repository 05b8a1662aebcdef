"""Request and response shapes of the ordering API.

Order ids are 64-bit integers, which JavaScript cannot hold exactly, so responses render them as
strings; paths accept the digits.

Orders are shown two ways, chosen in one place (:func:`ordering.api.rendering.shown_order`,
which writes these shapes): a merchant's secret key sees every field; a diner does not see what
belongs to the restaurant's back office (the provider's transaction id, who moved the order,
API key prefixes). The schema declares those fields as optional, so both shapes conform to it;
every other field of an answer is read-only and required, as every answer carries it.

The input serializers build their fields once per class, not once per request
(:mod:`config.prebuilt_fields`), and take each value as the JSON type it was sent in
(:mod:`idempotency.web.fields`): ``"1"`` is no quantity and ``1`` no note, as the idempotency
fingerprint, which tells ``"1"`` from ``1``, sees them too.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.prebuilt_fields import PrebuiltFieldsSerializer
from idempotency.web.fields import StrictCharField, StrictIntegerField, StrictRegexField
from ordering.api.rendering import shown_payment
from ordering.models import Dish, Order, OrderLine, OrderTransition, Payment
from ordering.services.lifecycle import MERCHANT_TARGETS
from ordering.services.placing import MAX_LINES, MAX_QUANTITY_PER_LINE, PAYMENT_METHODS

MERCHANT_ONLY = "Shown to merchant keys only."


class DishSerializer(serializers.ModelSerializer):
    available = serializers.SerializerMethodField()

    class Meta:
        model = Dish
        fields = ["id", "name", "description", "price", "stock", "available"]
        read_only_fields = fields

    def get_available(self, dish: Dish) -> bool:
        return dish.active and dish.stock > 0


@extend_schema_field(
    {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_QUANTITY_PER_LINE,
        "description": f"Portions; more than {MAX_QUANTITY_PER_LINE} of one dish per order "
        "answers 400 QUANTITY_INVALID",
    }
)
class QuantityField(StrictIntegerField):
    """Bounded here only by what a quantity can be at all (a 32-bit count, else
    ``VALIDATION_ERROR``): the placing service refuses more than ``MAX_QUANTITY_PER_LINE``
    portions of a dish (lines of one dish added up) with its own documented code,
    ``QUANTITY_INVALID``."""


class NamingChoiceField(serializers.ChoiceField):
    """Refuses a value by naming the choices, never by quoting it (DRF's message quotes it):
    an error answer is kept as the key's stored reply, and whatever a client put in the wrong
    field (a phone number) must not be kept with it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error_messages["invalid_choice"] = f"Must be one of: {', '.join(self.choices)}."


class ItemInSerializer(PrebuiltFieldsSerializer):
    dish_id = StrictIntegerField(min_value=1, max_value=2**63 - 1)
    quantity = QuantityField(min_value=1, max_value=2**31 - 1)


class ContactInSerializer(PrebuiltFieldsSerializer):
    """How to reach the diner: kept on the order, never in a stored reply (redacted)."""

    phone = StrictRegexField(
        r"^\+?[0-9 ().-]{3,32}$", required=False, allow_blank=True, max_length=32, default=""
    )
    address = StrictCharField(required=False, allow_blank=True, max_length=300, default="")


REDACTED_IN_REPLAYS = (
    "Personal data: null in a replay whose Idempotency-Redacted header names it "
    "(GET the order for the value)."
)


class ContactSerializer(serializers.Serializer):
    phone = serializers.CharField(
        source="contact_phone", allow_null=True, help_text=REDACTED_IN_REPLAYS
    )
    address = serializers.CharField(
        source="delivery_address", allow_null=True, help_text=REDACTED_IN_REPLAYS
    )


class PlaceOrderInSerializer(PrebuiltFieldsSerializer):
    items = ItemInSerializer(many=True, allow_empty=False, max_length=MAX_LINES)
    payment_method = NamingChoiceField(choices=PAYMENT_METHODS)
    coupon_code = StrictCharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=40,
        trim_whitespace=True,
        help_text="Read in capitals, as merchants' codes are written (welcome10 is WELCOME10).",
    )
    note = StrictCharField(required=False, allow_blank=True, max_length=500, default="")
    contact = ContactInSerializer(required=False)


class TransitionInSerializer(PrebuiltFieldsSerializer):
    to = NamingChoiceField(choices=MERCHANT_TARGETS)


class OrderLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = OrderLine
        fields = ["dish_id", "dish_name", "unit_price", "quantity", "line_total"]
        read_only_fields = fields


class DinerPaymentSerializer(serializers.ModelSerializer):
    # The order's method, one the request named: declared as those, not any string
    method = serializers.ChoiceField(choices=PAYMENT_METHODS, read_only=True)

    class Meta:
        model = Payment
        fields = ["provider", "method", "amount", "currency", "status"]
        read_only_fields = fields


class PaymentSerializer(DinerPaymentSerializer):
    provider_txn_id = serializers.CharField(required=False, help_text=MERCHANT_ONLY)

    class Meta(DinerPaymentSerializer.Meta):
        fields = ["provider", "provider_txn_id", "method", "amount", "currency", "status"]


class DinerTransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = OrderTransition
        fields = ["from_status", "to_status", "at"]
        read_only_fields = ["to_status", "at"]
        # Required, as every answer carries it, but not read-only: the schema of a read-only
        # choice drops the blank one, and an order's first transition comes from "".
        extra_kwargs = {"from_status": {"required": True}}


class TransitionSerializer(DinerTransitionSerializer):
    actor = serializers.CharField(required=False, help_text=MERCHANT_ONLY)

    class Meta(DinerTransitionSerializer.Meta):
        fields = ["from_status", "to_status", "actor", "at"]


class OrderSerializer(serializers.ModelSerializer):
    id = serializers.CharField(read_only=True)
    # What the request named (PlaceOrderIn's payment_method): declared as its choices, which
    # the model's free text field does not know
    payment_method = serializers.ChoiceField(choices=PAYMENT_METHODS, read_only=True)
    number = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Short number for people, per restaurant and business day (1, 2, ...)",
    )
    number_label = serializers.CharField(read_only=True, help_text='e.g. "#0427"')
    business_day = serializers.DateField(
        read_only=True, allow_null=True, help_text="The restaurant's calendar day of the number"
    )
    coupon_code = serializers.CharField(
        source="coupon.code", default=None, read_only=True, allow_null=True
    )
    contact = ContactSerializer(source="*", read_only=True)
    lines = OrderLineSerializer(many=True, read_only=True)
    payment = serializers.SerializerMethodField()

    class Meta:
        model = Order
        fields = [
            "id",
            "number",
            "number_label",
            "business_day",
            "status",
            "diner_id",
            "payment_method",
            "coupon_code",
            "subtotal",
            "discount",
            "total",
            "currency",
            "note",
            "contact",
            "lines",
            "payment",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    payment_serializer: type[serializers.ModelSerializer] = PaymentSerializer

    @extend_schema_field(PaymentSerializer(allow_null=True))
    def get_payment(self, order: Order) -> dict | None:
        payment = shown_payment(order)
        return self.payment_serializer(payment).data if payment else None


class OrderDetailSerializer(OrderSerializer):
    transitions = TransitionSerializer(many=True, read_only=True)

    class Meta(OrderSerializer.Meta):
        fields = [*OrderSerializer.Meta.fields, "transitions"]


class DinerOrderSerializer(OrderSerializer):
    payment_serializer = DinerPaymentSerializer


class DinerOrderDetailSerializer(DinerOrderSerializer):
    transitions = DinerTransitionSerializer(many=True, read_only=True)

    class Meta(OrderSerializer.Meta):
        fields = [*OrderSerializer.Meta.fields, "transitions"]


class PaginatedOrdersSerializer(serializers.Serializer):
    """The page envelope of ``GET /api/v1/orders/``: cursor pagination (the links carry the
    cursor), with the list's ``count`` that its page-number answer had."""

    count = serializers.IntegerField(
        min_value=0,
        help_text="Every order of the list, all pages, when this page was read, counted up to "
        "10,000: a list of more answers 10,000.",
    )
    next = serializers.URLField(
        allow_null=True, help_text="The older orders' page; null: none older."
    )
    previous = serializers.URLField(
        allow_null=True,
        help_text="The newer orders' page; null on the first page, and on a page read "
        "backwards that reached the newest orders.",
    )
    results = OrderSerializer(many=True)
