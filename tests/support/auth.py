"""Credentials for tests: API keys and diner sessions, made through the real services."""

from __future__ import annotations

from rest_framework.test import APIClient

from tenants.api_keys import issue_api_key
from tenants.diner_sessions import open_session
from tenants.models import ApiClient, Tenant


def diner_token(
    tenant: Tenant, diner_id: str = "diner-1", *, client: ApiClient | None = None
) -> str:
    """A Bearer token of ``diner_id``, signed in by a merchant key of ``tenant`` (a fresh one
    unless ``client`` is given) as the restaurant's backend would."""
    if client is None:
        client, _ = issue_api_key(tenant=tenant, name="test backend", kind=ApiClient.Kind.MERCHANT)
    return open_session(client=client, diner_id=diner_id).token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def with_auth(header: str) -> APIClient:
    """An API client that sends ``Authorization: <header>`` on every request."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client
