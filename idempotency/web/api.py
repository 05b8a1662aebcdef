"""HTTP glue for pre-issued tokens (:mod:`idempotency.core.tokens`): issue a batch, check a batch.

``POST idempotency-tokens/`` ``{"count": n}`` → 201 ``{"tokens": [...], "expires_at": ...,
"ttl_seconds": ...}``; ``POST idempotency-tokens/check/`` ``{"tokens": [...]}`` → 200
``{"results": [{"token": ..., "status": "unused" | "used" | "unknown" | "invalid"}]}``.
Both answer 503 ``IDEMPOTENCY_TOKENS_UNAVAILABLE`` (with ``Retry-After``) while the tenant's
Redis node cannot be used. Issuing counts against the caller's write rate limit, and answers 429
``IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED`` (``limit``, ``scope``; ``Retry-After``: until the oldest
outstanding tokens expire) when the caller would pass its share of outstanding tokens
(``scope``: "principal"), the tenant its quota ("tenant"), or a caller held to a share of the
quota (``TOKEN_QUOTA_SHARE``) that share ("tenant_share"); checking writes nothing and does
not.

Their OpenAPI description needs drf-spectacular (the engine's ``openapi`` extra); without it
the views work the same and are simply left undescribed.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from django.http import HttpResponse
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from idempotency.core import responses, tokens
from idempotency.core.conf import caller_scope, engine_hook, engine_setting
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.metrics import count_rate_limited
from idempotency.web.errors import ProblemAPIView
from idempotency.web.fields import BoundedListField, StrictCharField, StrictIntegerField
from idempotency.web.http import identity_refusal
from idempotency.web.throttle import TenantRateThrottle

UNAVAILABLE_RETRY_AFTER_SECONDS = 5


class IssueTokensIn(serializers.Serializer):
    count = StrictIntegerField(min_value=1, default=1)

    def get_fields(self) -> dict[str, serializers.Field]:
        # the bound is a setting, read when the serializer is used, so the OpenAPI schema
        # (``maximum``) says what this deployment enforces
        fields = super().get_fields()
        fields["count"] = StrictIntegerField(
            min_value=1, max_value=engine_setting("TOKEN_MAX_BATCH"), default=1
        )
        return fields


class IssuedTokensOut(serializers.Serializer):
    tokens = serializers.ListField(child=serializers.CharField())
    expires_at = serializers.DateTimeField()
    ttl_seconds = serializers.IntegerField()


class TokenTextField(StrictCharField):
    """A token to check, as sent: a NUL in it is no reason to refuse the batch.

    DRF's ``CharField`` refuses a string holding a NUL (400 ``VALIDATION_ERROR``), meant for
    text bound for PostgreSQL; a checked token only goes to Redis, after its signature, and a
    malformed token is answered ``invalid`` in the batch's 200. The schema admits any string of
    1-255 characters, so one such token made the whole batch a 400, the others unanswered."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ]


class CheckTokensIn(serializers.Serializer):
    # min_length=1: an empty token is refused (400, "may not be blank") before min_length is
    # read; it is there so the schema says so (minLength), as the server does
    tokens = BoundedListField(
        child=TokenTextField(min_length=1, max_length=255, trim_whitespace=False), min_length=1
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        # as IssueTokensIn: ``maxItems`` in the schema is this deployment's bound; a longer
        # list is refused before any token in it is looked at (idempotency.web.fields)
        fields = super().get_fields()
        fields["tokens"] = BoundedListField(
            child=TokenTextField(min_length=1, max_length=255, trim_whitespace=False),
            min_length=1,
            max_length=engine_setting("TOKEN_MAX_BATCH"),
        )
        return fields


class TokenStatusField(serializers.CharField):
    """A token's status. Described rather than declared as an enum: drf-spectacular would
    name it ``StatusEnum`` like the orders' ``status`` and warn about the collision."""


def _caller(request: Request) -> tuple[str, str] | HttpResponse:
    """(tenant, principal) as the engine names them, tokens being bound to both; or the
    refusal of an identity whose tokens would be stored under another tenant's keys."""
    identity = caller_scope(request)
    if identity is None:
        raise exceptions.PermissionDenied(
            "Idempotency tokens are issued only to callers this site identifies"
        )
    return identity_refusal(*identity) or identity


def _unavailable() -> HttpResponse:
    response = responses.problem(
        503,
        IdempotencyErrorCode.TOKENS_UNAVAILABLE,
        "Idempotency tokens are unavailable right now; retry later or send your own "
        "Idempotency-Key (e.g. a UUID).",
    )
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_SECONDS)
    return response


# the ``limit`` label of /metrics' idempotency_rate_limited_total for each refusing scope
_QUOTA_LIMIT_LABELS = {
    "tenant": "token_quota",
    "principal": "token_quota_principal",
    "tenant_share": "token_quota_share",
}


def _quota_exceeded(exc: tokens.QuotaExceeded) -> HttpResponse:
    # the engine's own words: a host's callers are its principals, whatever it calls them
    holder = {
        "principal": "You",
        "tenant_share": "This tenant, for callers held to a share of its quota as you are,",
    }.get(exc.scope, "This tenant")
    response = responses.problem(
        429,
        IdempotencyErrorCode.TOKEN_QUOTA_EXCEEDED,
        f"{holder} may have at most {exc.limit} idempotency tokens outstanding (issued, "
        "neither used nor expired); use or let expire the ones held, or send your own "
        "Idempotency-Key.",
        limit=exc.limit,
        scope=exc.scope,
    )
    response["Retry-After"] = str(exc.retry_after_seconds)
    return response


class IssueTokensView(ProblemAPIView):
    throttle_classes = [TenantRateThrottle]

    def post(self, request: Request) -> Any:
        """Issue up to 1,000 one-time tokens, each usable once as an ``Idempotency-Key``."""
        data = IssueTokensIn(data=request.data)
        data.is_valid(raise_exception=True)
        identity = _caller(request)
        if isinstance(identity, HttpResponse):
            return identity
        tenant, principal = identity
        share_of = engine_hook("TOKEN_QUOTA_SHARE")
        try:
            issued = tokens.issue_tokens(
                tenant=tenant,
                principal=principal,
                count=data.validated_data["count"],
                share=share_of(request) if share_of is not None else None,
            )
        except tokens.TokensUnavailable:
            return _unavailable()
        except tokens.QuotaExceeded as exc:
            count_rate_limited(tenant=tenant, limit=_QUOTA_LIMIT_LABELS[exc.scope])
            return _quota_exceeded(exc)
        body = IssuedTokensOut(
            {
                "tokens": issued.tokens,
                "expires_at": issued.expires_at,
                "ttl_seconds": issued.ttl_seconds,
            }
        ).data
        return Response(body, status=201)


class CheckTokensView(ProblemAPIView):
    def post(self, request: Request) -> Any:
        """Which of these tokens can still be used (one Redis round trip for all of them)."""
        data = CheckTokensIn(data=request.data)
        data.is_valid(raise_exception=True)
        identity = _caller(request)
        if isinstance(identity, HttpResponse):
            return identity
        tenant, principal = identity
        given = data.validated_data["tokens"]
        try:
            states = tokens.check_tokens(tenant=tenant, principal=principal, tokens=given)
        except tokens.TokensUnavailable:
            return _unavailable()
        results = [
            {"token": token, "status": state.value}
            for token, state in zip(given, states, strict=True)
        ]
        return Response({"results": results})


def _describe_for_openapi() -> None:
    """Attach the views' OpenAPI description when drf-spectacular is installed."""
    try:
        from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
    except ImportError:  # the "openapi" extra is not installed
        return
    from drf_spectacular.utils import OpenApiResponse

    from idempotency.web.openapi import PROBLEM_JSON, ProblemSerializer, problems

    # an enum, so that a client generated from the schema can switch on it
    extend_schema_field(
        {
            "type": "string",
            "enum": [status.value for status in tokens.TokenStatus],
            "description": "unused: issued to this caller, not used yet; used: consumed by an "
            "operation; unknown: Redis does not hold it (expired unused, never issued, or lost "
            "with Redis's data: it may have been used); invalid: malformed, forged, or another "
            "caller's",
        }
    )(TokenStatusField)
    check_out = inline_serializer(
        "CheckTokensOut",
        {
            "results": serializers.ListField(
                child=inline_serializer(
                    "TokenCheckResult",
                    {"token": serializers.CharField(), "status": TokenStatusField()},
                )
            )
        },
    )
    # a 429 here is the quota's as often as the rate limit's: each refusal is named, with
    # every scope the quota's answer carries (tokens.issue_tokens, issue_tokens.lua)
    refusals = problems(400, 401, 403, 413, 415, 429, 503)
    refusals[(429, PROBLEM_JSON)] = OpenApiResponse(
        ProblemSerializer,
        description="RATE_LIMITED: the write rate limit (Retry-After: the window's end); "
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED: the quota of outstanding tokens (`limit`, `scope`; "
        "Retry-After: until the oldest of them expire)",
    )
    extend_schema(
        request=IssueTokensIn,
        responses={201: IssuedTokensOut, **refusals},
        description="Answers 429 IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED when the batch would leave "
        "more tokens outstanding (issued, neither used nor expired) than the caller's share of "
        "the tenant's quota (`scope`: `principal`), than the tenant's quota (`tenant`), or, "
        "for a caller held to a share of it, than that share (`tenant_share`); 429 "
        "RATE_LIMITED when the write rate limit refuses it (one write, whatever the count).",
    )(IssueTokensView.post)
    extend_schema(
        request=CheckTokensIn,
        responses={200: check_out, **problems(400, 401, 403, 413, 415, 503)},
    )(CheckTokensView.post)


_describe_for_openapi()
