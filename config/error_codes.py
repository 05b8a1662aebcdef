"""Every code the API's error answers carry, read from the registries that name them: the
enums of orders, payments, tenants and the idempotency engine, and the codes the API's own
error handling gives (bare statuses, DRF's refusals, the database and HTTPS refusals).

The API schema declares these as the ``code`` of its ``Problem``
(:func:`config.schema_hooks.declare_problem_members`), so a client generated from it can tell
the codes apart; a code added to a registry reaches the schema without another list to edit.
"""

from __future__ import annotations

from config.api_errors import CODE_FOR_STATUS, DRF_CODES, VALIDATION_ERROR
from config.api_https import HTTPS_REQUIRED
from config.database_unavailable import DATABASE_UNAVAILABLE
from idempotency.core.error_codes import IdempotencyErrorCode
from ordering.error_codes import OrderingErrorCode
from ordering.payments.error_codes import PaymentErrorCode
from tenants.error_codes import TenantErrorCode

# Codes a registry declares that the HTTP API never answers, and why.
NOT_ANSWERED_BY_THE_API = frozenset(
    {
        # the API's serializer accepts only valid targets; the services raise it for other
        # callers
        OrderingErrorCode.INVALID_TRANSITION_TARGET,
        # dashboard-side: a user without a membership sees a page, not an API error
        TenantErrorCode.NOT_A_MEMBER,
        # the engine's refusal of a tenant over 64 characters, or holding ":" or "}": the
        # product's resolver gives a tenant's primary key, never that long nor holding either
        IdempotencyErrorCode.TENANT_INVALID,
        # and of a principal holding "|": the product's principals (diner:<id>, api:<prefix>,
        # …) are made of characters that exclude it
        IdempotencyErrorCode.PRINCIPAL_INVALID,
    }
)


def api_error_codes() -> list[str]:
    """The codes an error answer of the API may carry, sorted."""
    declared = {
        *OrderingErrorCode,
        *PaymentErrorCode,
        *TenantErrorCode,
        *IdempotencyErrorCode,
        *(code for code, _ in CODE_FOR_STATUS.values()),
        *(code for _, code in DRF_CODES),
        VALIDATION_ERROR,
        DATABASE_UNAVAILABLE,
        HTTPS_REQUIRED,
    }
    return sorted(str(code) for code in declared - NOT_ANSWERED_BY_THE_API)
