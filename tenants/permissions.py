"""The one permission layer: what each API credential and each dashboard role may do.

API views declare the capability each HTTP method needs (``capabilities = {"GET": ...}``);
:class:`HasDeclaredCapability` (DRF's default permission here) lets a request through when its
credential's kind holds one of them, per :data:`CAPABILITIES`. A view never looks at a
credential's kind itself: it asks :func:`may`. A method without a declaration is refused, so a
new endpoint is closed until someone writes down who may call it.

Dashboard views declare an :class:`Area`; :data:`DASHBOARD_ACCESS` names the least role that
reaches it (OWNER ⊃ MANAGER ⊃ STAFF). docs/tenancy.md shows both tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from config.api_errors import ApiError
from idempotency.web.throttle import answers
from tenants.error_codes import TenantErrorCode
from tenants.models import Membership
from tenants.principals import ApiPrincipal, CredentialKind


class Capability(StrEnum):
    READ_MENU = "menu:read"
    OPEN_GUEST_SESSION = "sessions:open-guest"
    SIGN_IN_DINER = "sessions:sign-in-diner"
    KEEP_OWN_SESSION = "sessions:own"  # refresh or end the session one holds
    REVOKE_DINER_SESSIONS = "sessions:revoke-diner"
    READ_ORDERS = "orders:read"  # a diner's own; a merchant's every order
    PLACE_ORDER = "orders:place"
    PAY_ORDER = "orders:pay"
    CANCEL_ORDER = "orders:cancel"
    MOVE_ORDERS = "orders:move"  # the kitchen's moves, cancel included
    SEE_INTERNAL_FIELDS = "orders:internal-fields"  # provider ids, staff actors, key prefixes
    USE_IDEMPOTENCY_TOKENS = "idempotency-tokens:use"


CAPABILITIES: Mapping[CredentialKind, frozenset[Capability]] = {
    # Ships inside the app: public. Reads the menu and opens a guest session, nothing else.
    CredentialKind.PUBLISHABLE: frozenset({Capability.READ_MENU, Capability.OPEN_GUEST_SESSION}),
    CredentialKind.DINER_SESSION: frozenset(
        {
            Capability.READ_MENU,
            Capability.KEEP_OWN_SESSION,
            Capability.READ_ORDERS,
            Capability.PLACE_ORDER,
            Capability.PAY_ORDER,
            Capability.CANCEL_ORDER,
            Capability.USE_IDEMPOTENCY_TOKENS,
        }
    ),
    # The restaurant's own server. It does not act as a diner: it signs one in.
    CredentialKind.MERCHANT: frozenset(
        {
            Capability.READ_MENU,
            Capability.SIGN_IN_DINER,
            Capability.REVOKE_DINER_SESSIONS,
            Capability.READ_ORDERS,
            Capability.MOVE_ORDERS,
            Capability.SEE_INTERNAL_FIELDS,
            Capability.USE_IDEMPOTENCY_TOKENS,
        }
    ),
}


def may(principal: ApiPrincipal, capability: Capability) -> bool:
    return capability in CAPABILITIES[principal.kind]


def kinds_holding(capabilities: Iterable[Capability]) -> list[CredentialKind]:
    """The credential kinds that hold at least one of ``capabilities`` (the OpenAPI schema
    lists exactly their security schemes on the operation)."""
    wanted = set(capabilities)
    return [kind for kind, held in CAPABILITIES.items() if held & wanted]


def declared_capabilities(view: Any, method: str) -> tuple[Capability, ...]:
    """What ``view`` declares for ``method`` (HEAD and OPTIONS as GET); () if nothing."""
    declared = getattr(view, "capabilities", None) or {}
    method = "GET" if method in ("HEAD", "OPTIONS") else method
    needed = declared.get(method, ())
    return (needed,) if isinstance(needed, Capability) else tuple(needed)


def declare(view_class: type, **capabilities: Capability | tuple[Capability, ...]) -> type:
    """``view_class`` with declared capabilities, for API views this product does not own
    (the idempotency engine's token endpoints)."""
    return type(view_class.__name__, (view_class,), {"capabilities": capabilities})


class HasDeclaredCapability(BasePermission):
    """The request's credential holds one of the capabilities its view declares for the
    method. No credential: 401 (DRF). Another credential: 403 ``PERMISSION_DENIED``."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, ApiPrincipal):
            return False
        method = request.method or "GET"
        if not answers(view, method):
            return True  # DRF answers 405 METHOD_NOT_ALLOWED: it needs no capability
        needed = declared_capabilities(view, method)
        if not any(may(principal, capability) for capability in needed):
            raise ApiError(
                status_code=403,
                code=TenantErrorCode.PERMISSION_DENIED,
                detail=f"A {principal.kind.value.replace('_', ' ')} credential may not do this",
            )
        return True


# --- dashboard ---------------------------------------------------------------------------

Role = Membership.Role
ROLE_RANK: Mapping[str, int] = {Role.STAFF: 1, Role.MANAGER: 2, Role.OWNER: 3}


class Area(StrEnum):
    """What a dashboard page or form belongs to."""

    ORDERS = "orders"  # board, order pages, the kitchen's moves
    CANCEL_ORDERS = "cancel_orders"  # cancelling an order (and so refunding a paid one)
    MENU = "menu"
    COUPONS = "coupons"
    DUPLICATES = "duplicates"  # the idempotency report
    API_KEYS = "api_keys"
    MEMBERS = "members"
    PRIVACY = "privacy"  # erasing a diner's data
    ACCOUNT = "account"  # switching restaurant: every member


DASHBOARD_ACCESS: Mapping[Area, str] = {
    Area.ACCOUNT: Role.STAFF,
    Area.ORDERS: Role.STAFF,
    Area.CANCEL_ORDERS: Role.MANAGER,
    Area.MENU: Role.MANAGER,
    Area.COUPONS: Role.MANAGER,
    Area.DUPLICATES: Role.MANAGER,
    Area.API_KEYS: Role.OWNER,
    Area.MEMBERS: Role.OWNER,
    Area.PRIVACY: Role.OWNER,
}


def role_reaches(role: str, area: Area) -> bool:
    return ROLE_RANK.get(role, 0) >= ROLE_RANK[DASHBOARD_ACCESS[area]]


def areas_of(role: str) -> frozenset[Area]:
    return frozenset(area for area in Area if role_reaches(role, area))
