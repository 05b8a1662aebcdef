"""/healthz and /readyz answer a probe by the server's address over plain HTTP, before the host
check and the HTTPS redirect; readiness is PostgreSQL's, Redis only reported (config/health.py)."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import redis
from django.db import connection
from django.http import HttpResponse
from django.test import Client

from idempotency.stores import nodes
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode
from tests.support.silent_database import answer_with_a_silent_database

pytestmark = pytest.mark.django_db

PROBE = {"HTTP_HOST": "10.0.0.5:8000"}  # an address, not a name in ALLOWED_HOSTS


@pytest.fixture
def production(settings) -> Client:
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["orders.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    return Client(raise_request_exception=False)


def test_liveness_answers_a_probe_by_address_over_plain_http(production):
    answer = production.get("/healthz", **PROBE)
    assert (answer.status_code, json.loads(answer.content)) == (200, {"status": "ok"})
    assert answer["Cache-Control"] == "no-store"
    # anything else by that address is still refused (red without the middleware: 400 here)
    assert production.get("/api/v1/menu/", **PROBE).status_code == 400


def test_readiness_is_the_database_s_and_reports_each_redis_node(production):
    answer = production.get("/readyz", **PROBE)
    assert answer.status_code == 200
    assert json.loads(answer.content) == {"status": "ok", "database": "ok", "redis": ["ok"]}


def test_a_redis_node_down_is_reported_but_the_server_stays_ready(production, monkeypatch):
    """Without Redis the engine runs database-only, still exactly once."""
    dead = redis.Redis(port=free_port(), socket_connect_timeout=1)
    monkeypatch.setattr("config.health.all_clients", lambda: [dead])
    answer = production.get("/readyz", **PROBE)
    assert answer.status_code == 200
    assert json.loads(answer.content)["redis"] == ["unavailable"]


def test_without_the_database_the_server_is_not_ready(production):
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())
    try:
        answer = production.get("/readyz", **PROBE)
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert answer.status_code == 503
    assert json.loads(answer.content)["database"] == "unavailable"


def test_a_database_that_does_not_answer_is_reported_before_a_balancer_gives_up(production):
    """A PostgreSQL that accepts connections and says nothing (a hung server, a stalled
    pooler, a partition that drops no packets) held the probe with no time limit: under
    gunicorn until its 30 s ``timeout`` killed the worker, which answered 500, not the 503 a
    balancer reads, and every probe meanwhile held a worker. It is ``unavailable`` within
    ``READINESS_TIMEOUT_SECONDS``."""
    answer = answer_with_a_silent_database(
        lambda: production.get("/readyz", **PROBE),
        within=30,  # generous: the probe's own limit is a few seconds
    )
    assert answer is not None, "the probe did not answer while the database stayed silent"
    assert answer.status_code == 503
    assert json.loads(answer.content)["database"] == "unavailable"


def test_redis_nodes_that_do_not_answer_do_not_hold_the_probe_one_after_another(
    production, monkeypatch
):
    """Redis does not decide readiness, yet each silent node held the probe for its socket
    timeout, one node after another: three hanging nodes made /readyz take three timeouts,
    past a balancer's, which then took every server out while the database served orders
    (database-only). The nodes are asked at once, within ``READINESS_TIMEOUT_SECONDS``."""
    silent = []
    for _ in range(3):
        node = socket.socket()
        node.bind(("127.0.0.1", 0))
        node.listen(16)  # the kernel completes the handshake; nobody ever answers
        silent.append(node)
    hanging = [
        redis.Redis(port=node.getsockname()[1], socket_timeout=30, socket_connect_timeout=30)
        for node in silent
    ]
    monkeypatch.setattr("config.health.all_clients", lambda: hanging)
    answers: list[HttpResponse] = []
    probe = threading.Thread(target=lambda: answers.append(production.get("/readyz", **PROBE)))
    try:
        probe.start()
        probe.join(timeout=45)  # generous: one node's timeout is 30 s, the probe's a few
        answered_in_time = not probe.is_alive()
    finally:
        for node in silent:
            node.close()
        probe.join(timeout=120)
    assert answered_in_time, "the probe waited on each silent node in turn"
    assert answers[0].status_code == 200
    assert json.loads(answers[0].content)["redis"] == ["unavailable"] * 3


def test_only_get_and_head_are_probes(production):
    assert production.post("/healthz", **PROBE).status_code == 400  # the host check again
    assert production.head("/healthz", **PROBE).status_code == 200


SCRAPER = "10.0.0.9"  # Prometheus, on the private network


@pytest.fixture
def scraping(production, settings) -> Client:
    settings.METRICS_ALLOWED_IPS = [SCRAPER]
    settings.METRICS_TOKEN = "scrape-token"
    return production


def test_prometheus_scrapes_each_server_by_address_from_its_allow_listed_address(scraping):
    answer = scraping.get("/metrics", REMOTE_ADDR=SCRAPER, **PROBE)
    assert answer.status_code == 200
    assert b"ordering_outbox_pending" in answer.content
    # from any other address, by address: the host check's 400 as before, no metrics
    assert scraping.get("/metrics", REMOTE_ADDR="10.0.0.66", **PROBE).status_code == 400
    # not a scrape: another method from the scraper's address is not answered early
    assert scraping.post("/metrics", REMOTE_ADDR=SCRAPER, **PROBE).status_code == 400


def test_the_token_is_honoured_over_https_by_the_site_s_name_only(scraping):
    token = {"HTTP_AUTHORIZATION": "Bearer scrape-token", "REMOTE_ADDR": "10.0.0.66"}
    assert scraping.get("/metrics", **token, **PROBE).status_code == 400  # by address
    by_name = {"HTTP_HOST": "orders.example.com"}
    assert scraping.get("/metrics", **token, **by_name).status_code == 301  # to HTTPS
    answer = scraping.get("/metrics", secure=True, **token, **by_name)
    assert answer.status_code == 200 and b"ordering_outbox_pending" in answer.content


def test_the_token_is_not_honoured_over_plain_http_with_the_redirect_off(scraping, settings):
    # with the redirect off, a plain request by the site's name reached the view, which
    # honoured a token that had crossed the network in the clear
    settings.SECURE_SSL_REDIRECT = False
    token = {"HTTP_AUTHORIZATION": "Bearer scrape-token", "HTTP_HOST": "orders.example.com"}
    assert scraping.get("/metrics", REMOTE_ADDR="10.0.0.66", **token).status_code == 404
    answer = scraping.get("/metrics", REMOTE_ADDR="10.0.0.66", secure=True, **token)
    assert answer.status_code == 200


def test_a_scrape_is_never_kept_by_a_cache_between_prometheus_and_the_server(scraping):
    """The metrics (each tenant's outcomes, payments waiting, dead letters) were answered with
    no Cache-Control, so a proxy caching the site's answers (nginx's proxy_cache_valid keys
    on the URL, not on Authorization) could keep a token scrape and hand it to anyone asking
    for /metrics; the probes already said no-store."""
    token = {"HTTP_AUTHORIZATION": "Bearer scrape-token", "HTTP_HOST": "orders.example.com"}
    by_token = scraping.get("/metrics", REMOTE_ADDR="10.0.0.66", secure=True, **token)
    by_address = scraping.get("/metrics", REMOTE_ADDR=SCRAPER, **PROBE)

    for answer in (by_token, by_address):
        assert answer.status_code == 200
        assert answer["Cache-Control"] == "no-store"


def test_a_node_this_process_s_breaker_took_out_of_use_is_reported_without_a_ping(
    production, tenant
):
    """A hanging node held the probe for its socket timeout, node after node (red: "ok", the
    node pinged although its breaker is open)."""
    node = nodes.node_for(str(tenant.pk))
    assert node is not None
    node.breaker._open(node.breaker._clock(), "an outage")
    try:
        answer = production.get("/readyz", **PROBE)
        assert json.loads(answer.content)["redis"] == ["unavailable"]
    finally:
        nodes.reset()
    assert json.loads(production.get("/readyz", **PROBE).content)["redis"] == ["ok"]


@pytest.mark.parametrize("refusal", ["a replica", "full, evicting nothing"])
def test_a_node_that_answers_but_refuses_writes_is_reported_unavailable(
    production, monkeypatch, refusal
):
    """A node demoted to a replica by a failover (or ``REDIS_URL`` naming one), or full at its
    ``maxmemory`` under ``noeviction``, answers a ``PING`` and refuses every claim: the engine
    runs its tenants database-only (docs/scaling.md), yet a ping called it ``ok`` (red), so
    an operator read a healthy node where every write failed."""
    primary = RedisNode().start()
    node = RedisNode().start() if refusal == "a replica" else primary
    try:
        if refusal == "a replica":
            node.client().replicaof("127.0.0.1", primary.port)
        else:
            node.client().config_set("maxmemory", "1")
            node.client().config_set("maxmemory-policy", "noeviction")
        monkeypatch.setattr("config.health.all_clients", lambda: [node.client(), primary.client()])
        answer = production.get("/readyz", **PROBE)
        assert answer.status_code == 200  # Redis is reported, it does not decide
        expected = ["unavailable", "ok"] if refusal == "a replica" else ["unavailable"] * 2
        assert json.loads(answer.content)["redis"] == expected
    finally:
        node.remove()
        primary.remove()
