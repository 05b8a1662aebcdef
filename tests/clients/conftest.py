"""Live servers and fault injectors for the client libraries' tests (clients/python,
clients/typescript).

``client_server`` is a real gunicorn on Redis + PostgreSQL, with an in-progress lease of
``LEASE_SECONDS`` (so a 409's ``Retry-After`` is seconds, not the default 30) and a guest-session
limit per address high enough for a test module's many guests from 127.0.0.1.
``client_server_database`` runs the engine on the database alone (pre-issued tokens answer 503
there). The failures are real too: :class:`~tests.support.fault_proxy.DroppingProxy` loses an
answer the server committed, :class:`RowLock` keeps a request running inside the server, and
:func:`exhaust_write_rate` fills a diner's rate-limit window on the server's Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import psycopg
import pytest
import redis
from django.conf import settings

from idempotency.core.conf import engine_setting
from idempotency.core.ratelimit import limit_per_window, rate_key
from idempotency.core.tokens import token_key
from ordering.models import Dish, Order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.support.fault_proxy import DroppingProxy
from tests.support.live_server import LiveServer, gunicorn_fixture

LEASE_SECONDS = 8
REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/0"
_SERVER_ENV: dict[str, str | None] = {
    "REDIS_SHARDS": None,
    "REDIS_CLUSTER_URL": None,
    "IDEMPOTENCY_LEASE_MS": str(LEASE_SECONDS * 1000),
    "DINER_SESSION_OPEN_RATE_PER_IP": "100000",
}

client_server = gunicorn_fixture(
    "client_server", env={**_SERVER_ENV, "REDIS_URL": REDIS_URL}, workers=3
)
client_server_database = gunicorn_fixture(
    "client_server_database", env={**_SERVER_ENV, "REDIS_URL": ""}, workers=2
)
# Leases order-ID worker ids from the database alone, for 6 s: a test holding every id in
# ``WorkerLease`` rows before its first order makes it answer 503 ORDER_ID_UNAVAILABLE.
client_server_without_worker_ids = gunicorn_fixture(
    "client_server_without_worker_ids",
    env={**_SERVER_ENV, "REDIS_URL": "", "ORDER_ID_LEASE_SECONDS": "6"},
    workers=1,
)


@dataclass(frozen=True)
class Shop:
    """A restaurant committed for the live server: one dish with plenty of stock and the
    publishable key its diner app ships."""

    tenant: Tenant
    dish: Dish
    publishable_key: str

    def orders_of(self, diner_id: str) -> int:
        return Order.objects.for_tenant(self.tenant).filter(diner_id=diner_id).count()

    def order_body(self, quantity: int = 1) -> dict:
        return {
            "items": [{"dish_id": self.dish.pk, "quantity": quantity}],
            "payment_method": "card",
        }


@pytest.fixture
def shop(transactional_db: None) -> Shop:
    tenant = Tenant.objects.create(slug="client-kit", name="Client Kit Pizza")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=10_000
    )
    _, key = issue_api_key(tenant=tenant, name="diner app", kind=ApiClient.Kind.PUBLISHABLE)
    return Shop(tenant=tenant, dish=dish, publishable_key=key)


@pytest.fixture
def proxy(client_server: LiveServer) -> Iterator[DroppingProxy]:
    dropping = DroppingProxy(client_server.url)
    yield dropping
    dropping.close()


class RowLock:
    """Holds ``SELECT … FOR UPDATE`` on one order in its own connection, so a request that
    updates the order (pay, cancel) blocks inside the server until :meth:`release`."""

    def __init__(self) -> None:
        db = settings.DATABASES["default"]
        self._conn = psycopg.connect(
            dbname=db["NAME"],
            user=db["USER"],
            host=db["HOST"],
            port=db["PORT"] or 5432,
            password=db["PASSWORD"] or None,
        )

    def hold(self, order_id: int) -> None:
        self._conn.execute(
            f"SELECT 1 FROM {Order._meta.db_table} WHERE id = %s FOR UPDATE", (order_id,)
        )

    def release(self) -> None:
        self._conn.rollback()

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def row_lock() -> Iterator[RowLock]:
    lock = RowLock()
    yield lock
    lock.release()
    lock.close()


def exhaust_write_rate(shop: Shop, diner_id: str, *, for_ms: int) -> None:
    """Fill the diner's current rate-limit window on the server's Redis and let it end in
    ``for_ms``: the diner's next write gets 429 with ``Retry-After`` = the time left."""
    window = int(engine_setting("RATE_LIMIT_WINDOW_SECONDS"))
    key = rate_key(tenant=str(shop.tenant.pk), principal=f"diner:{diner_id}", window_seconds=window)
    limit = limit_per_window(int(engine_setting("RATE_LIMIT_PER_MINUTE")), window)
    client = redis.Redis.from_url(REDIS_URL)
    client.set(key, limit, px=for_ms)
    client.close()


def forget_the_tokens_of(shop: Shop) -> int:
    """What a Redis that came back without its data does to a tenant's unused tokens: they are
    gone (only this tenant's token keys are deleted; its claims and the record stay)."""
    node = redis.Redis.from_url(REDIS_URL)
    keys = list(node.scan_iter(match=token_key(tenant=str(shop.tenant.pk), token="tok_*.x")))
    if keys:
        node.delete(*keys)
    node.close()
    return len(keys)


def set_tenant_status(shop: Shop, status: str) -> None:
    """Suspend or reactivate the restaurant through the product (``save``), which announces
    it to every process of the live server (tenants/credential_cache.py)."""
    tenant = Tenant.objects.get(pk=shop.tenant.pk)
    tenant.status = status
    tenant.save()
