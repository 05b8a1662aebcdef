"""The test project's SCOPE_RESOLVER: tenant and principal from headers.

Only a test may trust headers for this: a real resolver reads the authenticated caller (see
:func:`idempotency.tests.testapp.quickstart.scope`), never something a client can set.
"""

from __future__ import annotations

from django.http import HttpRequest


def from_headers(request: HttpRequest) -> tuple[str, str] | None:
    tenant = request.headers.get("X-Tenant")
    if not tenant:
        return None
    return tenant, request.headers.get("X-Principal", "anonymous")
