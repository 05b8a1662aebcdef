"""The API's two security schemes in the OpenAPI schema, listed per operation for exactly the
credentials whose capabilities reach it (``tenants.permissions``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from tenants.permissions import declared_capabilities, kinds_holding
from tenants.principals import CredentialKind


def _reaches(auto_schema: Any, kinds: set[CredentialKind]) -> bool:
    needed = declared_capabilities(auto_schema.view, auto_schema.method)
    return bool(kinds & set(kinds_holding(needed)))


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_requirement(self, auto_schema: Any) -> dict[str, list] | None:
        kinds = {CredentialKind.PUBLISHABLE, CredentialKind.MERCHANT}
        return {self.name: []} if _reaches(auto_schema, kinds) else None

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key <prefix>.<secret>`: a publishable key (diner apps; public: "
            "menu and guest sessions only) or a merchant's secret server key. Issued in the "
            "dashboard, shown once.",
        }


class DinerSessionScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.DinerSessionAuthentication"
    name = "Bearer"

    def get_security_requirement(self, auto_schema: Any) -> dict[str, list] | None:
        return {self.name: []} if _reaches(auto_schema, {CredentialKind.DINER_SESSION}) else None

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A diner session token from `POST /api/v1/diner-sessions/` "
            "(24 h, refreshable, revocable).",
        }
