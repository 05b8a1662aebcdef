"""Who is calling the API, once a credential has been checked: ``request.user`` of an API call."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

from tenants.models import ApiClient, Tenant


class CredentialKind(StrEnum):
    """The three API credentials; ``tenants.permissions.CAPABILITIES`` says what each may do."""

    PUBLISHABLE = ApiClient.Kind.PUBLISHABLE.value
    MERCHANT = ApiClient.Kind.MERCHANT.value
    DINER_SESSION = "diner_session"


@dataclass(frozen=True)
class ApiPrincipal:
    """The tenant, the credential's kind, the API key behind it (for a session: the key that
    opened it) and, for a session only, its diner. No request header adds or changes a diner:
    a diner is whoever the signed session says."""

    tenant: Tenant
    kind: CredentialKind
    client: ApiClient
    diner_id: str | None = None
    session_id: UUID | None = None

    is_authenticated = True

    @property
    def principal_id(self) -> str:
        """The identity idempotency scopes, tokens and rate limits follow: the diner for a
        session (a refreshed or second session of the same diner keeps its retries and shares
        its budget), else the API key."""
        if self.diner_id is not None:
            return f"diner:{self.diner_id}"
        return f"client:{self.client.pk}"

    @property
    def actor(self) -> str:
        """How the caller appears in an order's transition log (merchants see it, diners not)."""
        base = f"api:{self.client.prefix}"
        return f"{base}/diner:{self.diner_id}" if self.diner_id is not None else base
