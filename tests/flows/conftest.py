"""Fixtures for flows that run against a live multi-process server.

One gunicorn per engine mode, started at most once per module: ``live_gunicorn_redis`` (Redis +
database, the suite's one Redis node) and ``live_gunicorn_database`` (``REDIS_URL=""``, no shards,
no cluster: the engine runs on the database alone). ``live_gunicorn`` runs a test once against each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.conf import settings

from ordering.models import Dish
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.support.auth import diner_token
from tests.support.live_server import LiveServer, gunicorn_fixture

STOCK = 100
# The Redis the "redis" server uses: the suite's (tests/conftest.py cleans the same one).
REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/0"
# Server environments per engine mode. Every variable that configures Redis (config/settings.py)
# is set, so a mode means the same whatever topology the caller's environment names.
METRICS_TOKEN = "flows-metrics-token"
DATABASE_ONLY_ENV: dict[str, str | None] = {
    "REDIS_URL": "",
    "REDIS_SHARDS": None,
    "REDIS_CLUSTER_URL": None,
    "METRICS_TOKEN": METRICS_TOKEN,
}
ONE_REDIS_ENV: dict[str, str | None] = {**DATABASE_ONLY_ENV, "REDIS_URL": REDIS_URL}

live_gunicorn_redis = gunicorn_fixture("live_gunicorn_redis", env=ONE_REDIS_ENV)
live_gunicorn_database = gunicorn_fixture("live_gunicorn_database", env=DATABASE_ONLY_ENV)


@pytest.fixture(scope="module", params=["redis", "database"])
def live_gunicorn(request: pytest.FixtureRequest) -> LiveServer:
    """The live server of each engine mode in turn (tests are grouped by mode)."""
    return request.getfixturevalue(f"live_gunicorn_{request.param}")


@dataclass
class Shop:
    """A tenant with one dish, a publishable key and its backend's merchant key, committed for
    the live server to see. Diners act through session tokens (one session per diner)."""

    tenant: Tenant
    dish: Dish
    api_key: str
    backend: ApiClient
    backend_key: str
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def tenant_key(self) -> str:
        """The tenant as the idempotency engine names it (records, audits, Redis keys)."""
        return str(self.tenant.pk)

    def token(self, diner: str = "d1") -> str:
        if diner not in self.tokens:
            self.tokens[diner] = diner_token(self.tenant, diner, client=self.backend)
        return self.tokens[diner]

    def headers(self, *, diner: str = "d1") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(diner)}"}


@pytest.fixture
def shop(transactional_db: None) -> Shop:
    tenant = Tenant.objects.create(slug="storm", name="Storm Pizza")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=STOCK
    )
    _, api_key = issue_api_key(tenant=tenant, name="storm-app", kind=ApiClient.Kind.PUBLISHABLE)
    backend, backend_key = issue_api_key(
        tenant=tenant, name="storm-pos", kind=ApiClient.Kind.MERCHANT
    )
    return Shop(tenant=tenant, dish=dish, api_key=api_key, backend=backend, backend_key=backend_key)
