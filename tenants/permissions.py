"""DRF permissions over :class:`tenants.authentication.ApiPrincipal`."""

from __future__ import annotations

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from config.api_errors import ApiError
from tenants.authentication import ApiPrincipal
from tenants.error_codes import TenantErrorCode


class IsTenantClient(BasePermission):
    """Any valid API key of an active tenant."""

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.user, ApiPrincipal)


class IsMerchantClient(IsTenantClient):
    """Only merchant integrations (not diner apps) move orders through the kitchen states."""

    def has_permission(self, request: Request, view: object) -> bool:
        if not super().has_permission(request, view):
            return False
        if not request.user.is_merchant:
            raise ApiError(
                status_code=403,
                code=TenantErrorCode.PERMISSION_DENIED,
                detail="This action needs a merchant API key",
            )
        return True
