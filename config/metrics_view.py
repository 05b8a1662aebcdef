"""``GET /metrics``: Prometheus exposition of the engine's and the ordering app's metrics.

Not public. Allowed when the caller sends ``Authorization: Bearer <METRICS_TOKEN>``, or when its
address is in ``METRICS_ALLOWED_IPS``, an allow-list that is empty unless configured. No address
is trusted implicitly, loopback included: behind a reverse proxy on the same host every request
comes from loopback. Anyone else gets a plain 404, so the endpoint is not advertised.

Two ways to scrape, then. Through the site's proxy, over HTTPS with the site's host name and
the token, like any other request. Or by each server's own address over plain HTTP from an
allow-listed address (Prometheus on the private network scraping every server, not the
balancer's pick): :class:`MetricsByAddressMiddleware` answers those before the host check and
the HTTPS redirect, as the health probes are answered, and only those. The token is honoured
over HTTPS only (as the proxy reports it, ``SECURE_PROXY_SSL_HEADER``), with the HTTPS redirect
turned off too: a token sent over plain HTTP has been on the wire in the clear, and a scraper
sending it so is refused rather than left working that way. With DEBUG (the demo), over HTTP.

Besides the engine's and the ordering app's metrics it carries each tenant's stored records and
Redis keys (``idempotency/stores/usage.py`` says how fresh those are), each node's audit stream
read now (``idempotency/stores/stream_metrics.py``), and the retention purge's rows purged and
rows overdue (``tenants/retention_metrics.py``).
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from config.client_address import Network, trusted_networks, within
from idempotency.stores.stream_metrics import stream_registry
from idempotency.stores.usage import usage_registry
from ordering.metrics import database_registry
from tenants.retention_metrics import retention_registry

logger = logging.getLogger(__name__)


def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        raise Http404
    body = b"".join(
        _exposition(registry)
        for registry in (
            _process_registry(),
            database_registry(),
            usage_registry(),
            stream_registry(),
            retention_registry(),
        )
    )
    response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
    # Not public, so no cache between Prometheus and the server may keep it: one that keys on
    # the URL alone (nginx's proxy_cache_valid) would hand a token scrape to anyone
    response["Cache-Control"] = "no-store"
    return response


def _exposition(registry: CollectorRegistry) -> bytes:
    """One source's metrics, or none when reading the database for them fails.

    A PostgreSQL outage made the database-read gauges raise, and the whole scrape answered
    500: Prometheus lost every series, the Redis breakers and the duplicate counters too,
    while operators needed them. Those sources are left out (their alerts go quiet, not
    wrong; the outage is the database's own alert) and the rest is served."""
    try:
        return generate_latest(registry)
    except DatabaseError:
        logger.warning("/metrics: a source read from the database was left out", exc_info=True)
        return b""


def _process_registry() -> CollectorRegistry:
    """All gunicorn workers' metrics merged (multiprocess mode), or this process's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def _allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    over_https = request.is_secure() or settings.DEBUG
    if token and over_https and hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        return True
    return _allowed_address(request)


def _allowed_address(request: HttpRequest) -> bool:
    """The caller's address lies in ``METRICS_ALLOWED_IPS`` (addresses or networks, as
    ``TRUSTED_PROXIES``), compared as addresses, not as text."""
    allowed = _allowed_networks()
    return bool(allowed) and within(request.META.get("REMOTE_ADDR", ""), allowed)


def _allowed_networks() -> list[Network]:
    return trusted_networks(settings.METRICS_ALLOWED_IPS, setting="METRICS_ALLOWED_IPS")


class MetricsByAddressMiddleware:
    """``GET /metrics`` from an allow-listed address, answered before the host check and the
    HTTPS redirect; every other request goes on its way (a token scrape too)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        _allowed_networks()  # a malformed entry stops the server now, not at a scrape

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.path_info == "/metrics"
            and request.method == "GET"
            and _allowed_address(request)
        ):
            return metrics(request)
        return self.get_response(request)
