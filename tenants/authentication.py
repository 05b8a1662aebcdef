"""Who is calling the API: an API key, or a diner's session.

- ``Authorization: Api-Key <prefix>.<secret>``: a publishable key (diner apps; public) or a
  merchant's secret key. It names its tenant.
- ``Authorization: Bearer <token>``: a diner session (``tenants.diner_sessions``). It names its
  tenant and its diner.

``X-Diner-Id`` is not read: a diner is whoever a signed session says, never a header a caller
sets. A suspended tenant answers 403 ``TENANT_SUSPENDED`` whatever the credential.
"""

from __future__ import annotations

from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication

from config.api_errors import ApiError
from config.request_context import set_tenant
from tenants.api_keys import authenticate_api_key
from tenants.diner_sessions import SessionRefused, authenticate_token
from tenants.error_codes import TenantErrorCode
from tenants.models import ApiClient, Tenant
from tenants.principals import ApiPrincipal, CredentialKind

API_KEY = "Api-Key"
BEARER = "Bearer"


# The scheme's name is case-insensitive (RFC 9110 §11.1): a client sending "bearer" means Bearer.
_SCHEMES = {API_KEY.lower(): API_KEY, BEARER.lower(): BEARER}


def _credential(request: HttpRequest) -> tuple[str, str] | None:
    """(scheme, value) of the Authorization header, the scheme as named here; None without
    one. A header of another scheme, or with no value, is refused here so that both
    authenticators agree on it, and challenged with both schemes, as a request with no
    credential is: it is neither authenticator's own to name its scheme alone."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    named, _, value = header.partition(" ")
    scheme = _SCHEMES.get(named.lower(), "")
    if not scheme or not value.strip():
        raise ApiError(
            status_code=401,
            code=TenantErrorCode.API_KEY_INVALID,
            detail="Expected 'Authorization: Api-Key <key>' or 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": f"{API_KEY}, {BEARER}"},
        )
    return scheme, value.strip()


def _active(tenant: Tenant) -> None:
    if not tenant.is_active:
        raise ApiError(
            status_code=403, code=TenantErrorCode.TENANT_SUSPENDED, detail="Tenant is suspended"
        )
    set_tenant(str(tenant.pk), log_fields=tenant.log_fields)


class ApiKeyAuthentication(BaseAuthentication):
    keyword = API_KEY

    def authenticate(self, request: HttpRequest) -> tuple[ApiPrincipal, ApiClient] | None:
        credential = _credential(request)
        if credential is None or credential[0] != API_KEY:
            return None
        client = authenticate_api_key(credential[1])
        if client is None:
            raise ApiError(
                status_code=401,
                code=TenantErrorCode.API_KEY_INVALID,
                detail="Unknown or revoked API key",
                headers={"WWW-Authenticate": API_KEY},
            )
        _active(client.tenant)
        principal = ApiPrincipal(
            tenant=client.tenant, kind=CredentialKind(client.kind), client=client
        )
        return principal, client

    def authenticate_header(self, request: HttpRequest) -> str:
        return self.keyword


class DinerSessionAuthentication(BaseAuthentication):
    keyword = BEARER

    def authenticate(self, request: HttpRequest) -> tuple[ApiPrincipal, str] | None:
        credential = _credential(request)
        if credential is None or credential[0] != BEARER:
            return None
        try:
            claims, state = authenticate_token(credential[1])
        except SessionRefused as refused:
            raise ApiError(
                status_code=401,
                code=refused.code,
                detail=refused.detail,
                headers={"WWW-Authenticate": BEARER},
            ) from None
        _active(state.tenant)
        principal = ApiPrincipal(
            tenant=state.tenant,
            kind=CredentialKind.DINER_SESSION,
            client=state.client,
            diner_id=claims.diner_id,
            session_id=claims.session_id,
        )
        return principal, credential[1]

    def authenticate_header(self, request: HttpRequest) -> str:
        return self.keyword
