"""For a host's own test suite: the engine forgets, between tests, what it keeps outside the
database.

A test case's transaction (Django's ``TestCase``, pytest-django's ``django_db``) rolls the
database back after each test, records and business rows alike, but not what the engine keeps
beside it under Redis: the claims, replies, tokens and rate counters in Redis, and finished
results in this process's cache. A later test sending an earlier one's key for the same caller
(a user made in ``setUpTestData``, a fixed API key) was replayed the earlier test's answer,
naming rows its database never had, and its view did not run. Call :func:`reset_engine`
before each test.
"""

from __future__ import annotations

from idempotency.core.ratelimit import reset_rate_cache
from idempotency.core.tenant_policy import reset_tenant_policy_cache
from idempotency.erasure import delete_keys, node_clients, scan_pages
from idempotency.stores import nodes
from idempotency.stores.audit_stream import discard_all

# Every key the engine writes for a tenant carries the tenant's hash tag: claims and replies,
# tokens and their quota ledgers, rate counters (``idempotency/core/keys.py``)
TENANT_KEYS = "*{t:*"


def reset_engine() -> int:
    """Forget everything the engine keeps outside the database: this process's cached results,
    Redis nodes and circuit breakers, looked-up tenant rates and policies, queued audits, and,
    on every node ``ALL_REDIS_CLIENTS`` returns, the audit stream and every tenant's keys (so
    give the tests a Redis database of their own). Returns how many Redis keys it deleted."""
    discard_all()
    deleted = 0
    for client in node_clients():
        for page in scan_pages(client, (TENANT_KEYS,), batch=1000):
            deleted += delete_keys(client, page)
    nodes.reset()
    reset_rate_cache()
    reset_tenant_policy_cache()
    return deleted
