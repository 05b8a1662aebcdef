"""HTTP glue of diner sessions: open one, refresh or end one's own, end all of a diner's.

``POST diner-sessions/``: a publishable key and an empty body open a guest session; a merchant
key and ``{"diner_id": ...}`` sign that diner in. 201 ``{"token", "diner_id", "expires_at"}``.
``POST diner-sessions/refresh/`` and ``POST diner-sessions/end/`` act on the Bearer token's own
session; ``POST diners/<diner_id>/revoke-sessions/`` (merchant) ends all of a diner's sessions.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from config.api_errors import ApiError
from config.client_address import limited_address_of
from idempotency.core.ratelimit import RateDecision, check_rate
from idempotency.metrics import count_rate_limited
from idempotency.web.fields import StrictRegexField
from idempotency.web.openapi import PROBLEM_JSON, ProblemSerializer, problems
from idempotency.web.throttle import RateLimited, TenantRateThrottle, answers
from tenants.diner_sessions import (
    DINER_ID_RE,
    ERASED_PREFIX,
    GUEST_PREFIX,
    IssuedSession,
    SessionRefused,
    end_session,
    is_reserved_diner_id,
    open_session,
    read_token,
    refresh_session,
    revoke_diner,
)
from tenants.error_codes import TenantErrorCode
from tenants.permissions import Capability, may
from tenants.principals import ApiPrincipal

DINER_ID_PATTERN = DINER_ID_RE.pattern
# What the schema promises: the same characters, and not one of the prefixes reserved for ids
# made here (is_reserved_diner_id), which the server refuses with its own message. The pattern
# alone let a client generated from the schema send "guest_…" and get a 400.
# (Both prefixes are plain text in a regular expression: "-" is literal outside a class.)
SIGN_IN_DINER_ID_PATTERN = f"^(?!{GUEST_PREFIX}|{ERASED_PREFIX})" + DINER_ID_PATTERN.lstrip("^")


@extend_schema_field({"type": "string", "pattern": SIGN_IN_DINER_ID_PATTERN})
class SignInDinerIdField(StrictRegexField):
    """A diner id a merchant backend may name (the checks are ``validate_diner_id``'s), taken
    exactly as sent: DRF trims text by default, and ``"alice "`` signed in ``alice``, another
    person of the backend's, whose orders the session could then read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, trim_whitespace=False, **kwargs)


class OpenSessionIn(serializers.Serializer):
    diner_id = SignInDinerIdField(
        DINER_ID_PATTERN,
        required=False,
        help_text="Merchant keys only: the diner your backend signed in (1-64 of A-Za-z0-9_.:@-; "
        "not starting with 'guest_' or 'erased-').",
    )

    def validate_diner_id(self, value: str) -> str:
        if is_reserved_diner_id(value):
            raise serializers.ValidationError(
                "Diner ids starting with 'guest_' or 'erased-' are reserved."
            )
        return value


class RevokeDinerIn(serializers.Serializer):
    """The diner id in the revoke path: any id a session can carry (a guest's too)."""

    diner_id = StrictRegexField(DINER_ID_PATTERN, trim_whitespace=False)


SessionOut = inline_serializer(
    "DinerSessionOut",
    {
        "token": serializers.CharField(help_text="Send as 'Authorization: Bearer <token>'"),
        "diner_id": serializers.CharField(),
        "expires_at": serializers.DateTimeField(),
    },
)


def _session_body(issued: IssuedSession) -> dict[str, Any]:
    return {
        "token": issued.token,
        "diner_id": issued.diner_id,
        "expires_at": serializers.DateTimeField().to_representation(issued.expires_at),
    }


class TooManySessionsOpened(RateLimited):
    """429 ``RATE_LIMITED`` for a guest session refused: the detail names the budget that ran
    out (this address's or this key's), where the engine's words are about writes and the
    tenant's ceiling, which opening a session is neither."""

    def __init__(self, decision: RateDecision) -> None:
        super().__init__(decision)
        # check_rate's outer counter, here the key's, refuses with the tenant's scope
        whose = "with this key" if decision.scope == "tenant" else "from this address"
        self.detail = ErrorDetail(
            f"Too many guest sessions opened {whose}: the limit is {decision.limit} per "
            f"window; retry in {decision.retry_after_seconds} s.",
            code=self.default_code,
        )


class SessionOpenThrottle(BaseThrottle):
    """Guest sessions (a publishable key) are counted per client address and, when that
    allows them, per key, in one Redis call; a merchant key's sign-ins count as its writes.

    The address is ``REMOTE_ADDR``, the client's behind the site's proxies
    (``config/client_address.py``, docs/tenancy.md), or every diner would share the proxy's
    budget; an IPv6 client is counted by its /64, all of which it may send from."""

    def allow_request(self, request: Any, view: Any) -> bool:
        if not answers(view, request.method):
            return True  # a 405 opens no session: it costs none of the budget
        principal: ApiPrincipal = request.user
        if may(principal, Capability.SIGN_IN_DINER):
            return TenantRateThrottle().allow_request(request, view)
        tenant = str(principal.tenant.pk)
        decision = check_rate(
            tenant=tenant,
            counter=f"open-session:ip:{limited_address_of(request)}",
            per_minute=settings.DINER_SESSION_OPEN_RATE_PER_IP,
            outer=(
                f"open-session:client:{principal.client.pk}",
                settings.DINER_SESSION_OPEN_RATE_PER_KEY,
            ),
        )
        if decision is None or decision.allowed:
            return True
        # check_rate's outer counter, here the key's, refuses with the tenant's scope
        budget = "session_key" if decision.scope == "tenant" else "session_address"
        count_rate_limited(tenant=tenant, limit=budget)
        raise TooManySessionsOpened(decision)


# Opening a guest session is no write: its 429 comes from the limits on opening them
# (SessionOpenThrottle), a merchant's sign-in from its key's write limit; the engine's wording
# ("Write rate limit reached") names the latter alone.
OPEN_REFUSALS = {
    **problems(400, 401, 403, 413, 415, 429),
    (429, PROBLEM_JSON): OpenApiResponse(
        ProblemSerializer,
        description="RATE_LIMITED (Retry-After): too many guest sessions opened, per client "
        "address (DINER_SESSION_OPEN_RATE_PER_IP, 20 a minute by default) or per publishable "
        "key (DINER_SESSION_OPEN_RATE_PER_KEY, 600); a merchant key's sign-in, by that key's "
        "write rate limit",
    ),
}


class DinerSessionsView(APIView):
    capabilities = {"POST": (Capability.OPEN_GUEST_SESSION, Capability.SIGN_IN_DINER)}
    throttle_classes = [SessionOpenThrottle]

    @extend_schema(
        operation_id="diner_sessions_open",
        request=OpenSessionIn,
        responses={201: SessionOut, **OPEN_REFUSALS},
    )
    def post(self, request: Request) -> Response:
        """Open a diner session. A publishable key sends an empty body and gets a guest diner;
        a merchant key names the diner its backend signed in."""
        data = OpenSessionIn(data=request.data)
        data.is_valid(raise_exception=True)
        principal: ApiPrincipal = request.user
        diner_id = data.validated_data.get("diner_id")
        if may(principal, Capability.SIGN_IN_DINER):
            if diner_id is None:
                raise ApiError(
                    status_code=400,
                    code="VALIDATION_ERROR",
                    detail="Invalid input",
                    errors={"diner_id": ["This field is required with a merchant key."]},
                )
        elif diner_id is not None:
            raise ApiError(
                status_code=403,
                code=TenantErrorCode.PERMISSION_DENIED,
                detail="A publishable key opens guest sessions only; send an empty body",
            )
        issued = open_session(client=principal.client, diner_id=diner_id)
        return Response(_session_body(issued), status=201)


def refuse_a_body_that_is_not_json(request: Request) -> None:
    """Reads the body these operations take none of, so one sent is held to every write's
    rule: a body that is not well-formed JSON is 400 ``INVALID_JSON`` (``config/parsers.py``),
    before anything is done. Unread, it let a refresh, a sign-out or a revocation act on a
    body that paying or cancelling (which read none either) refuse."""
    request.data  # noqa: B018 - parsing it is the check


class RefreshSessionView(APIView):
    capabilities = {"POST": Capability.KEEP_OWN_SESSION}
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="diner_sessions_refresh",
        request=None,
        responses={200: SessionOut, **problems(400, 401, 403, 429)},
    )
    def post(self, request: Request) -> Response:
        """A token of the same session with a later expiry (the old one stays valid until its
        own expiry, so a lost answer can be refreshed again)."""
        refuse_a_body_that_is_not_json(request)
        try:
            issued = refresh_session(claims=read_token(request.auth))
        except SessionRefused as refused:
            raise ApiError(
                status_code=401,
                code=refused.code,
                detail=refused.detail,
                headers={"WWW-Authenticate": "Bearer"},
            ) from None
        return Response(_session_body(issued))


class EndSessionView(APIView):
    """Sign-out is not rate limited: held to the tenant's ceiling, it was refused whenever
    other guests had spent their share, which anyone holding the public key can keep spent,
    and a shared device stayed signed in as its last diner. It needs no limit: a session
    ends once, and its token is refused (401) before any throttle from then on."""

    capabilities = {"POST": Capability.KEEP_OWN_SESSION}
    throttle_classes: list[type] = []

    @extend_schema(
        operation_id="diner_sessions_end",
        request=None,
        responses={204: None, **problems(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        """Sign out: this session's tokens are refused from now on."""
        refuse_a_body_that_is_not_json(request)
        end_session(session_id=request.user.session_id)
        return Response(status=204)


class RevokeDinerSessionsView(APIView):
    capabilities = {"POST": Capability.REVOKE_DINER_SESSIONS}
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="diner_sessions_revoke_diner",
        parameters=[
            OpenApiParameter(
                "diner_id", {"type": "string", "pattern": DINER_ID_PATTERN}, OpenApiParameter.PATH
            )
        ],
        request=None,
        responses={
            200: inline_serializer("RevokedSessions", {"revoked": serializers.IntegerField()}),
            **problems(400, 401, 403, 404, 429),
        },
    )
    def post(self, request: Request, diner_id: str) -> Response:
        """End every session of one diner (e.g. the diner's account was closed or stolen).
        An id no diner can have is 400 VALIDATION_ERROR, as when signing one in."""
        refuse_a_body_that_is_not_json(request)
        path = RevokeDinerIn(data={"diner_id": diner_id})
        path.is_valid(raise_exception=True)
        revoked = revoke_diner(tenant=request.user.tenant, diner_id=diner_id)
        return Response({"revoked": revoked})
