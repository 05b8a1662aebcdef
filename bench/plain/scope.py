"""The engine's scope for the benchmark endpoints: they have no caller to scope by, so they
share one fixed scope (tenant ``0``); every other request is scoped as the product does."""

from __future__ import annotations

from django.http import HttpRequest

from tenants import idempotency_scope

BENCH_TENANT = "0"
PREFIX = "/api/bench/"


def resolve(request: HttpRequest) -> tuple[str, str] | None:
    if request.path.startswith(PREFIX):
        return BENCH_TENANT, "bench"
    return idempotency_scope.resolve(request)
