"""``GET /metrics``: Prometheus exposition of the engine's and the ordering app's metrics.

Not public. Allowed when the caller's address is in ``METRICS_ALLOWED_IPS`` (default loopback)
or, if ``METRICS_TOKEN`` is set, when it sends ``Authorization: Bearer <token>``. Anyone else
gets a plain 404, so the endpoint is not advertised. Behind a proxy, prefer the token: the
proxy's address is what REMOTE_ADDR shows.
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from ordering.metrics import database_registry


def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        raise Http404
    body = generate_latest(_process_registry()) + generate_latest(database_registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


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
    if token and hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        return True
    return request.META.get("REMOTE_ADDR", "") in settings.METRICS_ALLOWED_IPS
