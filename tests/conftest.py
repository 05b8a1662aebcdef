"""Fixtures shared by the whole suite. Tests run against real PostgreSQL and Redis.

``make test`` exports DATABASE_URL (PostgreSQL) and REDIS_URL; the suite refuses to run on the
embedded SQLite default, because its claims are about PostgreSQL's behaviour.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from ordering.models import Coupon, Dish
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.support.auth import diner_token
from tests.support.migrations import back_to_latest  # noqa: F401 - a fixture for migration tests


def pytest_configure(config: pytest.Config) -> None:
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        raise pytest.UsageError(
            "The test suite needs PostgreSQL: run `make test` (or set DATABASE_URL=postgres://...)"
        )
    # In this process audits are drained by the tests themselves (audit_stream.drain_audits()), so a
    # background thread never touches the database outside a test's transaction.
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "AUDIT_IN_BACKGROUND": False}


@pytest.fixture
def make_tenant(db: None) -> Callable[..., Tenant]:
    counter = iter(range(1, 10_000))

    def make(slug: str | None = None, **fields: Any) -> Tenant:
        n = next(counter)
        return Tenant.objects.create(
            slug=slug or f"tenant-{n}", name=fields.pop("name", f"T{n}"), **fields
        )

    return make


@pytest.fixture
def tenant(make_tenant: Callable[..., Tenant]) -> Tenant:
    return make_tenant("alpha")


@pytest.fixture
def other_tenant(make_tenant: Callable[..., Tenant]) -> Tenant:
    return make_tenant("beta")


def menu_for(tenant: Tenant, stock: int = 50) -> dict[str, Dish]:
    return {
        "pizza": Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name="Pizza", price=Decimal("9.50"), stock=stock
        ),
        "pasta": Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name="Pasta", price=Decimal("12.00"), stock=stock
        ),
    }


@pytest.fixture
def menu(tenant: Tenant) -> dict[str, Dish]:
    return menu_for(tenant)


@pytest.fixture
def coupon(tenant: Tenant) -> Coupon:
    return Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="TEN", kind=Coupon.Kind.PERCENT, value=Decimal("10"), max_uses=2
    )


def api_for(
    tenant: Tenant, *, kind: str = ApiClient.Kind.PUBLISHABLE, diner: str | None = None
) -> APIClient:
    """A DRF test client of ``tenant``: with ``diner``, a diner session's Bearer token (signed
    in by a fresh merchant key); without, a fresh API key of ``kind``."""
    client = APIClient()
    if diner is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {diner_token(tenant, diner)}")
        return client
    _, key = issue_api_key(tenant=tenant, name=f"test-{kind}", kind=kind)
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


@pytest.fixture
def api(tenant: Tenant) -> APIClient:
    """A diner's app: the session of diner ``diner-1``."""
    return api_for(tenant, diner="diner-1")


@pytest.fixture
def publishable_api(tenant: Tenant) -> APIClient:
    return api_for(tenant)


@pytest.fixture
def merchant_api(tenant: Tenant) -> APIClient:
    return api_for(tenant, kind=ApiClient.Kind.MERCHANT)


def no_redis(tenant_key: str) -> None:
    """REDIS_CLIENT_FOR_TENANT for database-only mode."""
    return None


@pytest.fixture
def celery_eager() -> Iterator[None]:
    """Celery tasks run in the test process, right after the commit that schedules them: for
    tests of what a task does, not of the broker (that is tests/workers/)."""
    from config.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture(autouse=True)
def clean_engine_state() -> Any:
    """Each test starts with no idempotency entries or rate counters of the app's tenants
    (tenant pks restart with every test database, so leftovers of an earlier run would replay
    or eat a budget), an empty local cache, no cached session states and no pause of the
    broker's sends left by an earlier test's failed one. Other tests' keys (non-numeric tenant
    tags) are left alone."""
    import redis

    from idempotency.core.tenant_policy import reset_tenant_policy_cache
    from idempotency.stores import nodes as stores
    from idempotency.stores.audit_stream import discard_all
    from ordering import order_ids
    from ordering.background import dispatch
    from tenants import credential_cache, session_state

    discard_all()
    dispatch._broker = dispatch.broker_breaker()
    session_state.clear()
    reset_tenant_policy_cache()  # tenant pks restart: no policy of an earlier test's tenant
    client = redis.Redis.from_url(settings.REDIS_URL or "redis://127.0.0.1:6379/0")
    keys = [
        *client.scan_iter(match="idem:{t:[0-9]*", count=1000),
        *client.scan_iter(match="rl:{t:[0-9]*", count=1000),  # rate counters, same reason
    ]
    if keys:
        client.delete(*keys)
    client.close()
    stores.reset()
    generator = order_ids._process_generator
    yield
    stores.reset()
    if _topology_changed.is_set():
        _topology_changed.clear()
        # What this process built on the test's nodes goes with them: the credential feed's
        # client, and an order-ID generator whose worker id is leased (and heartbeaten) there.
        credential_cache.feed.stop()
        if order_ids._process_generator is not generator:
            order_ids._process_generator._lease.release()
            order_ids._process_generator = generator


@pytest.fixture(params=["redis", "database"])
def engine_mode(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """Run a test in both engine modes: Redis + database, and database-only.

    Afterwards, the mode really was the one named: database-only reached no Redis node (the
    engine met one per node it used), and the Redis mode reached one."""
    from idempotency.stores import nodes as stores

    if request.param == "database":
        settings.IDEMPOTENCY = {
            **settings.IDEMPOTENCY,
            "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
        }
    stores.reset()
    yield request.param
    used = stores.breaker_states()
    assert (used == {}) is (request.param == "database"), f"{request.param} mode used {used}"


@pytest.fixture(scope="session")
def shard_nodes() -> Any:
    """Three standalone Redis nodes for the sharded topology (stopped at the end)."""
    from tests.support.redis_nodes import RedisNode

    nodes = [RedisNode().start() for _ in range(3)]
    yield nodes
    for node in nodes:
        node.remove()


@pytest.fixture(scope="session")
def cluster_nodes() -> Any:
    """A three-master Redis Cluster (stopped at the end)."""
    from tests.support.redis_nodes import start_cluster

    nodes = start_cluster(3)
    yield nodes
    for node in nodes:
        node.remove()


# Whether the running test pointed the app at other Redis nodes (clean_engine_state undoes it).
_topology_changed = threading.Event()


def use_topology(
    settings: Any, *, shards: list[str] | None = None, cluster: str | None = None
) -> None:
    """Point the app at other Redis nodes for one test (settings fixture restores them)."""
    from idempotency.stores import nodes as stores

    _topology_changed.set()

    base = (
        dict(settings.CACHES["default"]["OPTIONS"])
        if "OPTIONS" in settings.CACHES["default"]
        else {}
    )
    base.pop("CONNECTION_FACTORY", None)

    def cache(url: str, **extra: Any) -> dict:
        return {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {**base, **extra},
        }

    if cluster:
        settings.CACHES = {
            "default": cache(
                cluster, CONNECTION_FACTORY="tenants.redis_routing.ClusterConnectionFactory"
            )
        }
        settings.REDIS_NODE_ALIASES = ["default"]
    else:
        aliases = [f"redis-{i}" for i in range(len(shards or []))]
        settings.CACHES = {a: cache(u) for a, u in zip(aliases, shards or [], strict=True)}
        settings.CACHES["default"] = settings.CACHES[aliases[0]]
        settings.REDIS_NODE_ALIASES = aliases
    stores.reset()
