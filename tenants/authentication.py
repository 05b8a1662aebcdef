"""Who is calling the API: the tenant's API client and, optionally, one diner.

``Authorization: Api-Key <prefix>.<secret>`` names the API client and so the tenant.
``X-Diner-Id: <opaque id>`` (optional) names the diner on whose behalf a diner app acts; the app
backend vouches for it. A suspended tenant answers 403 ``TENANT_SUSPENDED``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication

from config.api_errors import ApiError
from config.request_context import set_tenant
from tenants.api_keys import authenticate_api_key
from tenants.error_codes import TenantErrorCode
from tenants.models import ApiClient, Tenant

DINER_ID_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")


@dataclass(frozen=True)
class ApiPrincipal:
    """``request.user`` of an API request: the tenant, its client and the diner, if any."""

    tenant: Tenant
    client: ApiClient
    diner_id: str | None

    is_authenticated = True

    @property
    def principal_id(self) -> str:
        """Stable identity for idempotency scopes and audits."""
        return f"client:{self.client.pk}/diner:{self.diner_id or '-'}"

    @property
    def is_merchant(self) -> bool:
        return self.client.kind == ApiClient.Kind.MERCHANT


class ApiKeyAuthentication(BaseAuthentication):
    keyword = "Api-Key"

    def authenticate(self, request: HttpRequest) -> tuple[ApiPrincipal, ApiClient] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw_key = header.partition(" ")
        if scheme != self.keyword or not raw_key.strip():
            raise ApiError(
                status_code=401,
                code=TenantErrorCode.API_KEY_INVALID,
                detail="Expected 'Authorization: Api-Key <key>'",
            )
        client = authenticate_api_key(raw_key.strip())
        if client is None:
            raise ApiError(
                status_code=401,
                code=TenantErrorCode.API_KEY_INVALID,
                detail="Unknown or revoked API key",
            )
        if not client.tenant.is_active:
            raise ApiError(
                status_code=403, code=TenantErrorCode.TENANT_SUSPENDED, detail="Tenant is suspended"
            )
        diner_id = request.META.get("HTTP_X_DINER_ID")
        if diner_id is not None and not DINER_ID_RE.fullmatch(diner_id):
            raise ApiError(
                status_code=400,
                code=TenantErrorCode.DINER_ID_INVALID,
                detail="X-Diner-Id must be 1-64 characters of letters, digits and _.:@-",
            )
        set_tenant(str(client.tenant_id))
        return ApiPrincipal(tenant=client.tenant, client=client, diner_id=diner_id), client

    def authenticate_header(self, request: HttpRequest) -> str:
        return self.keyword
