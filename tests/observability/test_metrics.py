"""/metrics: restricted, and it carries the engine's and the ordering app's metrics."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.http import HttpResponse
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from config.metrics_view import MetricsByAddressMiddleware
from idempotency.core.ratelimit import reset_rate_cache
from idempotency.models import AuditStreamCursor
from idempotency.stores import nodes
from idempotency.stores.audit_stream import stream_key
from idempotency.stores.nodes import node_name
from idempotency.stores.usage import usage
from ordering.models import Compensation, EventType, Order, OutboxEvent, ProviderConflict
from ordering.payments.capture_refunds import capture_refund_id, refund_unwanted_capture
from ordering.payments.conflicts import resolve_conflict
from ordering.services.lifecycle import cancel_order
from ordering.simulation import plan_fault
from ordering.worker_ids import lease_worker_id
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tenants.redis_routing import all_clients
from tests.conftest import use_topology
from tests.flows.test_idempotent_orders import post_order
from tests.payments.helpers import paying_order
from tests.payments.test_capture_refunds import capture
from tests.support.auth import with_auth
from tests.support.broker import sending_to
from tests.support.ports import free_port

pytestmark = pytest.mark.django_db


def samples(body: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def value(body: str, name: str, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples(body).items() if n == name and set(labels.items()) <= set(ls)
    )


TOKEN = "s3cret-token"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN


def scrape(client, **extra: str):
    # over HTTPS: the token is honoured there only
    return client.get("/metrics", secure=True, HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **extra)


def test_metrics_are_not_public(client):
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 404
    assert (
        client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer nope").status_code
        == 404
    )
    ok = scrape(client, REMOTE_ADDR="10.1.2.3")
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_loopback_is_not_trusted_without_an_allow_list(client, address):
    """Behind a reverse proxy on the same host every request comes from loopback (the
    default settings trusted it)."""
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 404


def test_without_a_token_nothing_is_served_by_default(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


def test_an_explicit_allow_list_admits_its_addresses_only(client, settings):
    settings.METRICS_ALLOWED_IPS = ["10.9.8.7"]
    assert client.get("/metrics", REMOTE_ADDR="10.9.8.7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404


@pytest.mark.parametrize(
    "listed, scraper",
    [
        pytest.param("10.9.8.0/24", "10.9.8.7", id="a-network"),
        pytest.param("fd00::0009", "fd00::9", id="an-ipv6-address-spelt-out"),
        pytest.param("10.9.8.7", "::ffff:10.9.8.7", id="ipv4-through-a-dual-stack-socket"),
        # the scraper's address as a dual-stack socket shows it (REMOTE_ADDR, gunicorn's log)
        pytest.param(
            "::ffff:10.9.8.7", "::ffff:10.9.8.7", id="listed-as-a-dual-stack-socket-shows"
        ),
        pytest.param("::ffff:10.9.8.7", "10.9.8.7", id="listed-mapped-scraped-over-ipv4"),
        pytest.param("::ffff:10.9.8.0/120", "10.9.8.7", id="a-mapped-network"),
    ],
)
def test_the_allow_list_admits_a_listed_network_or_address_however_it_is_written(
    client, settings, listed, scraper
):
    """The list was compared as text: a network, as TRUSTED_PROXIES takes, or another spelling
    of the scraper's address answered Prometheus 404, as if it were anyone."""
    settings.METRICS_ALLOWED_IPS = [listed]
    assert client.get("/metrics", REMOTE_ADDR=scraper).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.9.9.7").status_code == 404


def test_an_allow_list_entry_that_is_no_address_stops_the_server(settings):
    settings.METRICS_ALLOWED_IPS = ["prometheus.internal"]
    with pytest.raises(ImproperlyConfigured, match=r"METRICS_ALLOWED_IPS: 'prometheus\.internal'"):
        MetricsByAddressMiddleware(lambda request: HttpResponse())


def test_outcomes_breaker_outbox_and_conflicts_are_exported(
    client, api, merchant_api, menu, tenant
):
    before = scrape(client).content.decode()
    endpoint = "POST api/v1/orders/"
    first = post_order(api, menu, key="m1")
    post_order(api, menu, key="m1")
    post_order(api, menu, key="m1", quantity=5)
    post_order(api, menu, key="ключ")
    order_id = first.json()["id"]
    merchant_api.post(f"/api/v1/orders/{order_id}/transition/", {"to": "READY"}, format="json")
    body = scrape(client).content.decode()
    t = str(tenant.pk)
    for outcome, n in (("MISS", 1), ("HIT", 1), ("REUSED", 1), ("INVALID", 1)):
        delta = value(
            body, "idempotency_outcomes_total", tenant=t, endpoint=endpoint, outcome=outcome
        ) - value(
            before, "idempotency_outcomes_total", tenant=t, endpoint=endpoint, outcome=outcome
        )
        assert delta == n, (outcome, [x for x in body.splitlines() if "outcomes_total{" in x])
    assert (
        value(body, "ordering_fsm_conflicts_total", tenant=t)
        - value(before, "ordering_fsm_conflicts_total", tenant=t)
        == 1
    )
    assert value(body, "idempotency_redis_seconds_count", op="claim") >= 3
    assert re.search(r"^idempotency_breaker_state\{node=\"[^\"]+\"\} 0\.0$", body, re.M)
    assert "ordering_outbox_lag_seconds" in body and "ordering_dead_letters" in body
    assert Order.all_tenants.count() == 1


def test_requests_refused_by_each_rate_limit_are_counted_per_tenant_and_limit(
    client, settings, tenant, other_tenant
):
    """Whoever holds the public key can spend a key's guest sessions or the guests' share of
    the ceiling, and the restaurant's diners then get 429: the refusals are counted, per
    tenant and per limit, so the restaurant can see it and act (a new key, a shorter expiry)."""
    # given guest sessions limited to 1 per address and 2 per key; writes to 3 per principal;
    # a ceiling of 5, of which guests may fill 4
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 1
    settings.DINER_SESSION_OPEN_RATE_PER_KEY = 2
    settings.API_GUEST_CEILING_SHARE = 0.8
    tenant.write_rate_per_minute = 3
    tenant.write_ceiling_per_minute = 5
    tenant.save(update_fields=["write_rate_per_minute", "write_ceiling_per_minute"])
    reset_rate_cache()
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    _, secret = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    app = with_auth(f"Api-Key {publishable}")
    before = scrape(client).content.decode()

    # when guests open sessions past an address's budget, then past the key's
    opened = [app.post("/api/v1/diner-sessions/", REMOTE_ADDR=a) for a in ("10.0.0.1",) * 2]
    opened += [app.post("/api/v1/diner-sessions/", REMOTE_ADDR=a) for a in ("10.0.0.2", "10.0.0.3")]
    assert [r.status_code for r in opened] == [201, 429, 201, 429]
    first, second = (
        with_auth(f"Bearer {r.json()['token']}") for r in opened if r.status_code == 201
    )
    # and one guest writes past its own limit (3 taken), the other past the guests' share (4)
    # and the merchant past the whole ceiling (5)
    writes = [
        first.post("/api/v1/idempotency-tokens/", {"count": 1}, format="json") for _ in "1234"
    ]
    writes += [
        second.post("/api/v1/idempotency-tokens/", {"count": 1}, format="json") for _ in "12"
    ]
    merchant = with_auth(f"Api-Key {secret}")
    writes += [
        merchant.post("/api/v1/idempotency-tokens/", {"count": 1}, format="json") for _ in "12"
    ]
    assert [r.status_code for r in writes] == [201, 201, 201, 429, 201, 429, 201, 429]

    # then each refusal is counted on the tenant, under the limit that refused it
    body = scrape(client).content.decode()
    t = str(tenant.pk)

    def refused(tenant_key: str, limit: str) -> float:
        name = "idempotency_rate_limited_total"
        return value(body, name, tenant=tenant_key, limit=limit) - value(
            before, name, tenant=tenant_key, limit=limit
        )

    counted = {
        limit: refused(t, limit)
        for limit in ("session_address", "session_key", "principal", "ceiling_share", "ceiling")
    }
    assert counted == dict.fromkeys(counted, 1.0)
    assert refused(str(other_tenant.pk), "ceiling_share") == 0
    reset_rate_cache()


def test_token_requests_refused_by_the_quota_are_counted_per_tenant_and_holder(
    client, settings, tenant, other_tenant
):
    """Guest sessions fill their share of a tenant's token quota for a day
    (docs/idempotency.md): guests are then refused tokens, and the refusals are counted so
    that it can be seen."""
    settings.API_GUEST_CEILING_SHARE = 0.8
    # given a quota of 2,500 tokens outstanding: 1,000 (one batch) for each principal
    tenant.token_quota = 2500
    tenant.save(update_fields=["token_quota"])
    _, publishable = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    _, secret = issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    app = with_auth(f"Api-Key {publishable}")
    guests = [
        with_auth(f"Bearer {app.post('/api/v1/diner-sessions/').json()['token']}") for _ in "12"
    ]
    merchant = with_auth(f"Api-Key {secret}")
    before = scrape(client).content.decode()

    # when a guest asks past its own share, another past the guests' share (2,000, the
    # merchant's 600 included), and a diner the merchant signed in past the whole quota
    signed_in = merchant.post("/api/v1/diner-sessions/", {"diner_id": "alice"}, format="json")
    diner = with_auth(f"Bearer {signed_in.json()['token']}")
    asked = [(merchant, 600), (guests[0], 1000), (guests[0], 1), (guests[1], 500)]
    asked += [(diner, 1000)]
    answers = [
        holder.post("/api/v1/idempotency-tokens/", {"count": n}, format="json")
        for holder, n in asked
    ]
    assert [r.status_code for r in answers] == [201, 201, 429, 429, 429]
    scopes = [r.json()["scope"] for r in answers if r.status_code == 429]
    assert scopes == ["principal", "tenant_share", "tenant"]

    # then each is counted on the tenant, under the quota that refused it
    body = scrape(client).content.decode()

    def refused(tenant_key: str, limit: str) -> float:
        name = "idempotency_rate_limited_total"
        return value(body, name, tenant=tenant_key, limit=limit) - value(
            before, name, tenant=tenant_key, limit=limit
        )

    t = str(tenant.pk)
    counted = {
        limit: refused(t, limit)
        for limit in ("token_quota_principal", "token_quota_share", "token_quota")
    }
    assert counted == dict.fromkeys(counted, 1.0)
    assert refused(str(other_tenant.pk), "token_quota") == 0


def free_ids(body: str) -> dict[str, float]:
    return {
        store: value(body, "ordering_order_id_worker_ids_free", store=store)
        for store in ("redis", "database")
    }


def test_free_order_id_worker_ids_follow_the_leases(client):
    # given Redis configured: Redis leases ids 0..63 and the database 64..127
    body = scrape(client).content.decode()
    for store in ("redis", "database"):
        assert value(body, "ordering_order_id_worker_ids_capacity", store=store) == 64
    before = free_ids(body)
    # when three more processes lease an id
    handles = [lease_worker_id(lease_seconds=30) for _ in range(3)]
    try:
        # then three fewer are free in Redis
        held = free_ids(scrape(client).content.decode())
        assert held == {"redis": before["redis"] - 3, "database": before["database"]}
    finally:
        for handle in handles:
            handle.release()
    assert free_ids(scrape(client).content.decode()) == before


def test_an_unreachable_redis_has_no_free_worker_ids(client, transactional_db, settings):
    use_topology(settings, shards=["redis://127.0.0.1:1/0"])  # nothing listens on port 1
    assert free_ids(scrape(client).content.decode()) == {"redis": 0, "database": 64}
    handle = lease_worker_id(lease_seconds=30)  # a process starting now: the database's range
    try:
        assert free_ids(scrape(client).content.decode()) == {"redis": 0, "database": 63}
    finally:
        handle.release()


def test_the_audit_streams_are_read_when_scraped(client):
    """What waits in each node's audit stream, and how long the oldest entry past the node's
    cursor has waited, read at scrape time: true whichever process drains (the Celery worker
    serves no /metrics; red with the old gauge, which only a draining process set)."""
    [node] = all_clients()
    name = node_name(node)
    an_hour_ago = f"{int((time.time() - 3600) * 1000)}-0"
    node.xadd(stream_key(), {"e": "waiting"}, id=an_hour_ago)
    body = scrape(client).content.decode()
    assert value(body, "idempotency_audit_stream_length", node=name) == 1
    assert 3590 < value(body, "idempotency_audit_stream_oldest_seconds", node=name) < 3700
    # once a drain copied it (its cursor past the entry), nothing waits, even before the trim
    AuditStreamCursor.objects.create(stream=f"{name} {stream_key()}", last_id=an_hour_ago)
    body = scrape(client).content.decode()
    assert value(body, "idempotency_audit_stream_length", node=name) == 1
    assert value(body, "idempotency_audit_stream_oldest_seconds", node=name) == 0
    node.delete(stream_key())


def test_an_audit_s_wait_is_measured_on_its_node_s_clock(client, monkeypatch):
    """Entry ids are the node's clock: with this server's clock an hour ahead of the node's,
    an audit appended just now had "waited" an hour, and IdempotencyAuditsNotDrained paged on
    every scrape that found an entry not yet drained (one behind it hid a stuck drain)."""
    [node] = all_clients()
    name = node_name(node)
    node.xadd(stream_key(), {"e": "waiting"})  # numbered by the node's clock, now
    app_clock = time.time
    monkeypatch.setattr(time, "time", lambda: app_clock() + 3600)
    body = scrape(client).content.decode()
    assert value(body, "idempotency_audit_stream_length", node=name) == 1
    assert value(body, "idempotency_audit_stream_oldest_seconds", node=name) < 60
    node.delete(stream_key())


def test_a_node_that_does_not_answer_the_scrape_reads_unreachable(client, settings):
    """Each node the scrape could read is 1, each it could not is 0. RedisBreakerOpen was
    the only sign of a dead node, and a breaker opens only on enough calls (min_calls, 20 in
    10 s in each process): with the light traffic of a quiet hour no breaker ever opened, and
    nothing paged while tokens answered 503 and every write paid a failed connect."""
    from tests.support.redis_nodes import RedisNode

    up, down = RedisNode().start(), RedisNode().start()
    try:
        use_topology(settings, shards=[up.url, down.url])
        down.stop()
        body = scrape(client).content.decode()
        named = {url.removeprefix("redis://"): url for url in (up.url, down.url)}
        reachable = {
            dict(labels)["node"]: v
            for (n, labels), v in samples(body).items()
            if n == "idempotency_redis_node_reachable"
        }
        assert reachable == {node: float(url == up.url) for node, url in named.items()}
    finally:
        up.remove()
        down.remove()


def test_a_node_whose_breaker_is_open_is_left_out_of_the_scrape(client, tenant):
    """Its streams and keys are not read: a hanging node held the scrape for its socket
    timeout per read, node after node, past the scraper's own timeout (red: reported)."""
    [redis_node] = all_clients()
    name = node_name(redis_node)
    redis_node.xadd(stream_key(), {"e": "waiting"})
    node = nodes.node_for(str(tenant.pk))
    assert node is not None and node.name == name
    node.breaker._open(node.breaker._clock(), "an outage")
    usage.reset()  # no census of the node yet: a SCAN of it would complete one (a small keyspace)
    try:
        body = scrape(client).content.decode()
        assert ("idempotency_audit_stream_length", frozenset({("node", name)})) not in samples(body)
        # nor is its key census advanced (read from this process's census, not the server's
        # command counts, which every other client of the Redis server moves)
        census = usage.census()[name]
        assert (census.cursor, census.completed_at, census.partial) == (0, None, {})
    finally:
        usage.reset()
        nodes.reset()
        redis_node.delete(stream_key())


ALERTED_ON_THEIR_FIRST_INCREASE = [
    # (metric, label, the values an alert's increase() is taken over)
    ("idempotency_audits_dropped_total", "reason", ("queue_full", "write_failed")),
    ("ordering_order_id_clock_backsteps_total", "outcome", ("waited", "refused")),
]


@pytest.mark.parametrize(("name", "label", "values"), ALERTED_ON_THEIR_FIRST_INCREASE)
def test_counters_alerted_on_by_increase_are_exported_at_zero_before_their_first_event(
    name, label, values
):
    """``IdempotencyAuditsDropped`` and ``OrderIdClockSteppedBack``/``OrderIdsRefusedClockBehind``
    fire on ``increase(...) > 0``. A labelled series that first appears with the event has no
    earlier sample, so Prometheus counts no increase: the first audits a process dropped, or the
    first order IDs it refused, raised no alert. Read from a fresh process, as a new worker
    serves its first scrape."""
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); import ordering.metrics, idempotency.metrics; "
            "from prometheus_client import REGISTRY, generate_latest; "
            "print(generate_latest(REGISTRY).decode())",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    exported = samples(fresh.stdout)
    for wanted in values:
        assert exported.get((name, frozenset({(label, wanted)}))) == 0.0, (name, wanted)


def test_an_event_the_broker_took_but_no_worker_finished_shows_its_age(client, api, menu, tenant):
    """With the broker up and every Celery worker down, each event is published at once and
    waits in the queue: ``ordering_outbox_lag_seconds`` (unpublished events only) stayed 0,
    so ``OutboxLagging``, whose description names workers that are down, never fired while
    paid orders' cancels waited for their refunds. ``ordering_outbox_unconsumed_oldest_seconds``
    counts from the event's creation until a consumer is done with it."""
    order = Order.all_tenants.get(pk=post_order(api, menu, key="o1").json()["id"])
    # given an event the broker accepted 20 minutes ago, which no worker has consumed
    twenty_minutes_ago = timezone.now() - timedelta(minutes=20)
    event = OutboxEvent.all_tenants.create(
        tenant=tenant,
        order=order,
        event_type=EventType.CANCEL_REQUESTED,
        version=1,
        published_at=twenty_minutes_ago,
        last_publish_at=twenty_minutes_ago,
        resend_at=timezone.now() + timedelta(minutes=10),
    )
    OutboxEvent.all_tenants.filter(pk=event.pk).update(created_at=twenty_minutes_ago)
    body = scrape(client).content.decode()
    assert value(body, "ordering_outbox_lag_seconds") == 0  # nothing left to publish
    assert value(body, "ordering_outbox_unconsumed_oldest_seconds") >= 20 * 60
    # once a worker is done with it, nothing waits
    OutboxEvent.all_tenants.filter(pk=event.pk).update(consumed_at=timezone.now())
    assert value(scrape(client).content.decode(), "ordering_outbox_unconsumed_oldest_seconds") == 0


def test_a_database_outage_leaves_the_process_s_own_metrics_in_the_scrape(client):
    """The database-read gauges (outbox, dead letters, payments, retention, records per
    tenant) raised on a PostgreSQL outage and the whole scrape answered 500: Prometheus lost
    every series, the Redis breakers and the duplicate counters included, exactly while
    operators needed them. Those sources are left out; the rest is served."""
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())  # nothing listens: PostgreSQL is down
    try:
        answer = scrape(client)
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert answer.status_code == 200
    body = answer.content.decode()
    assert ("idempotency_audits_dropped_total", frozenset({("reason", "queue_full")})) in (
        samples(body)
    )
    assert "ordering_outbox_lag_seconds" not in body


def test_open_provider_conflicts_waiting_for_staff_are_counted_per_kind(client, tenant, menu):
    """A provider conflict the platform does not settle by itself (another amount reported, a
    success for an order no longer paying, a refund of unwanted money that failed for good)
    waits for staff, who saw it only by opening the admin: nothing was exported, so nothing
    paged. ``ordering_provider_conflicts_waiting`` counts them per kind, read from the
    database at scrape time; money the platform is still refunding needs nobody, and is left
    out, as are resolved conflicts."""

    def waiting() -> dict[str, float]:
        body = scrape(client).content.decode()
        return {
            dict(labels)["kind"]: v
            for (name, labels), v in samples(body).items()
            if name == "ordering_provider_conflicts_waiting"
        }

    # every kind is exported, at 0 before the first conflict (its alert needs a series)
    assert waiting() == dict.fromkeys(ProviderConflict.Kind.values, 0.0)
    # given another amount reported twice (one resolved by staff), money taken after a cancel
    # that the platform is refunding, and such money whose refund failed for good
    first, resolved, refunding, failed = (paying_order(tenant, menu["pizza"])[1] for _ in "abcd")
    for payment in (refunding, failed):
        cancel_order(tenant=tenant, order_id=payment.order_id, actor="diner")
    plan_fault(order=failed.order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    with override_settings(SAGA_MAX_RETRIES=0), sending_to("memory://"):
        assert capture(first, amount=Decimal("1.00")) == "conflict"
        assert capture(resolved, amount=Decimal("1.00")) == "conflict"
        assert capture(refunding) == capture(failed) == "conflict"
        refund_unwanted_capture(compensation_id=capture_refund_id(failed.pk))
    resolve_conflict(
        conflict_id=ProviderConflict.all_tenants.get(payment=resolved).pk,
        outcome="refunded",
        note="refunded at the provider",
        actor="staff:a",
    )
    # then the scrape counts the two that wait for staff, each under its kind
    assert waiting() == {
        **dict.fromkeys(ProviderConflict.Kind.values, 0.0),
        "amount_mismatch": 1.0,
        "paid_after_cancel": 1.0,
    }
