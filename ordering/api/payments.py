"""The payment provider's webhook: ``POST /api/v1/payments/callback/``.

No API key: the HMAC signature over the raw body authenticates the provider
(``ordering.payments.signatures``). The view hands the exact bytes received to the webhook
service and shapes its answer; see ``ordering.payments.callbacks`` for what each answer means.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.web.openapi import problems
from ordering.models import OrderStatus, ProviderConflict
from ordering.payments import departed
from ordering.payments.callbacks import handle_payment_callback
from ordering.payments.signatures import (
    LONGEST_TIMESTAMP,
    PROVIDER_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
)


class PaymentCallbackView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="payment_callback",
        auth=[],
        parameters=[
            # as the server reads them: a configured provider's name (none sent: the default
            # one), Unix seconds of at most LONGEST_TIMESTAMP digits; any other value is 400
            OpenApiParameter(
                PROVIDER_HEADER,
                {"type": "string", "enum": sorted(settings.PAYMENT_PROVIDERS)},
                OpenApiParameter.HEADER,
                required=False,
            ),
            OpenApiParameter(
                TIMESTAMP_HEADER,
                {"type": "integer", "minimum": 0, "maximum": 10**LONGEST_TIMESTAMP - 1},
                OpenApiParameter.HEADER,
                required=True,
            ),
            OpenApiParameter(SIGNATURE_HEADER, str, OpenApiParameter.HEADER, required=True),
        ],
        request=OpenApiTypes.OBJECT,
        responses={
            200: inline_serializer(
                "PaymentCallbackResult",
                {
                    "result": serializers.ChoiceField(
                        choices=["applied", "duplicate", "ignored", "conflict"]
                    ),
                    "order_id": serializers.CharField(),
                    # enums, so that an integration generated from the schema can switch
                    # on the order's status and on the kind of conflict recorded
                    "order_status": serializers.ChoiceField(choices=OrderStatus.choices),
                    "conflict": serializers.ChoiceField(
                        choices=[
                            *ProviderConflict.Kind.choices,
                            (departed.CONFLICT_KIND, departed.CONFLICT_LABEL),
                        ],
                        allow_null=True,
                    ),
                },
            ),
            **problems(400, 401, 404, 413, 415),
        },
    )
    def post(self, request: Request) -> Response:
        """A provider event (payment succeeded or failed), signed with the provider's secret.

        Every authentic event answers 200, duplicates and late events included, so the
        provider stops retrying; forged or stale signatures 401/400, nothing written.
        """
        result = handle_payment_callback(
            provider_name=request.headers.get(PROVIDER_HEADER) or settings.PAYMENT_DEFAULT_PROVIDER,
            raw_body=request.body,
            timestamp=request.headers.get(TIMESTAMP_HEADER),
            signature=request.headers.get(SIGNATURE_HEADER),
        )
        return Response(result.as_dict())
