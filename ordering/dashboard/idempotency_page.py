"""How many duplicate submissions were absorbed for this restaurant, and what was refused."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from idempotency.models import DuplicateAudit
from idempotency.selectors import hourly_hits, latest_audits, outcome_totals
from idempotency.stores.breaker import BreakerState
from idempotency.stores.nodes import node_for
from ordering.dashboard.access import member_required, render_page, tenant_of
from ordering.dashboard.charts import hit_rate_chart
from tenants.permissions import Area

HOURS = 24
LATEST = 10
PROBLEM_OUTCOMES = ("REUSED", "CONFLICT", "IN_PROGRESS")
# Audits name the resource by the URL the first answer pointed at (API or dashboard).
ORDER_REF = re.compile(r"^/(?:api/v1|dashboard)/orders/(?P<order_id>\d+)/$")


@dataclass(frozen=True)
class AuditRow:
    audit: DuplicateAudit
    order_id: str | None
    order_url: str | None


def rows(audits: Iterable[DuplicateAudit]) -> list[AuditRow]:
    """Audits with a link to the order page when the resource is one of this tenant's orders
    (the audits are already the tenant's, and the order page 404s anything else)."""
    result = []
    for audit in audits:
        match = ORDER_REF.match(audit.resource_ref)
        order_id = match["order_id"] if match else None
        url = reverse("dash-order", kwargs={"order_id": order_id}) if order_id else None
        result.append(AuditRow(audit=audit, order_id=order_id, order_url=url))
    return result


def engine_state(tenant_key: str) -> tuple[str, str]:
    """(mode, breaker state) of the tenant's Redis node as this process sees it. Reads the
    breaker without asking it for permission, so viewing the page never uses up a probe."""
    node = node_for(tenant_key)
    if node is None:
        return "Database only (no Redis configured)", "—"
    state = node.breaker.state
    mode = {
        BreakerState.CLOSED: "Redis + database",
        BreakerState.OPEN: "Database only (Redis breaker open)",
        BreakerState.HALF_OPEN: "Database only, probing Redis",
    }[state]
    return mode, state.value.replace("_", "-")


@member_required(Area.DUPLICATES)
@require_safe
def idempotency(request: HttpRequest) -> HttpResponse:
    tenant_key = str(tenant_of(request).pk)
    hours = hourly_hits(tenant_key=tenant_key, hours=HOURS)
    hits = sum(h.hits for h in hours)
    firsts = sum(h.first_executions for h in hours)
    mode, breaker_state = engine_state(tenant_key)
    return render_page(
        request,
        "dashboard/idempotency.html",
        {
            "chart": hit_rate_chart(hours),
            "hours": hours,
            "hits": hits,
            "first_executions": firsts,
            "hit_rate": f"{hits / (hits + firsts):.0%}" if hits + firsts else "—",
            "totals": outcome_totals(
                tenant_key=tenant_key, since=timezone.now() - timedelta(hours=HOURS)
            ),
            "duplicate_hits": rows(
                latest_audits(tenant_key=tenant_key, outcomes=["HIT"], limit=LATEST)
            ),
            "problems": rows(
                latest_audits(tenant_key=tenant_key, outcomes=PROBLEM_OUTCOMES, limit=LATEST)
            ),
            "engine_mode": mode,
            "breaker_state": breaker_state,
        },
        section="idempotency",
    )
