"""The Duplicates page: what repeated requests this restaurant's apps and staff sent, and that
each was answered once.

Written for a restaurant owner, not an engineer: requests are named for what they did ("Place
an order (diner app)"), outcomes say what happened in plain words, orders appear by their short
number. How the engine works (Redis, the circuit breaker, where an answer came from) is for
platform staff and lives in the admin (``idempotency.admin.audits``).
"""

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
from idempotency.reports import hourly_hits, latest_audits, outcome_totals
from ordering.dashboard.access import member_required, render_page, tenant_of
from ordering.dashboard.charts import hit_rate_chart
from ordering.models import Order
from ordering.models.orders import number_label
from tenants.models import Tenant
from tenants.permissions import Area

HOURS = 24
LATEST = 10
PROBLEM_OUTCOMES = ("REUSED", "CONFLICT", "IN_PROGRESS")
# Audits name the resource by the URL the first answer pointed at (API or dashboard); a
# payment callback's audit names its order by the bare id.
ORDER_REF = re.compile(r"^(?:/(?:api/v1|dashboard)/orders/(?P<order_id>\d+)/|(?P<bare_id>\d+))$")
# What a request did, by its method and route (audits record "POST api/v1/orders/").
REQUEST_NAMES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), name)
    for p, name in [
        (r"^POST /?api/v1/orders/$", "Place an order (diner app)"),
        (r"^POST /?api/v1/orders/[^/]+/pay/$", "Pay for an order (diner app)"),
        (r"^POST /?api/v1/orders/[^/]+/cancel/$", "Cancel an order (app)"),
        (r"^POST /?api/v1/orders/[^/]+/transition/$", "Move an order (your own system)"),
        (r"^POST /?api/v1/idempotency-tokens/", "Get request keys (app)"),
        (r"^POST /?api/v1/payments/callback/$", "Payment confirmation (payment provider)"),
        (r"^POST /?dashboard/orders/[^/]+/transition/$", "Move an order (dashboard)"),
        (r"^POST /?dashboard/menu/", "Change the menu (dashboard)"),
        (r"^POST /?dashboard/coupons/", "Change coupons (dashboard)"),
        (r"^POST /?dashboard/api-keys/", "Change API keys (dashboard)"),
        (r"^POST /?dashboard/members/", "Change members (dashboard)"),
        (r"^POST /?dashboard/privacy/", "Erase a diner's data (dashboard)"),
        (r"^POST /?dashboard/switch-tenant/$", "Switch restaurant (dashboard)"),
    ]
]
OUTCOME_WORDS = {
    "HIT": "Answered with the first result",
    "REUSED": "Refused: same request key, different contents",
    "CONFLICT": "Not done again: already done elsewhere",
    "IN_PROGRESS": "Asked to wait: the first was still running",
}


# A payment callback's CONFLICT is no duplicate made elsewhere: the provider reported a payment
# that does not fit the order (another amount, a cancelled or already paid order, a failure
# after a success), and it was not applied (``ordering/payments/callbacks.py``).
CALLBACK = re.compile(r"^POST /?api/v1/payments/callback/$")
CALLBACK_CONFLICT = "Not applied: the payment provider reported what does not fit the order"


def outcome_words(audit: DuplicateAudit) -> str:
    if audit.outcome == "CONFLICT" and CALLBACK.match(audit.endpoint):
        return CALLBACK_CONFLICT
    return OUTCOME_WORDS.get(audit.outcome, audit.get_outcome_display())


def request_name(endpoint: str) -> str:
    for pattern, name in REQUEST_NAMES:
        if pattern.match(endpoint):
            return name
    return "Other request"


@dataclass(frozen=True)
class AuditRow:
    audit: DuplicateAudit
    request: str
    outcome: str
    order_label: str | None
    order_url: str | None


def rows(tenant: Tenant, audits: Iterable[DuplicateAudit]) -> list[AuditRow]:
    """Audits in words, with a link to the order page when the resource is one of this
    tenant's orders (the audits are already the tenant's, and the order page 404s anything
    else). Orders are named by their short number, read as plain values in one query: an
    order built as a model instance reads its status again (the lifecycle's bookkeeping), one
    statement per order linked."""
    audits = list(audits)
    order_ids = {}
    for audit in audits:
        match = ORDER_REF.match(audit.resource_ref)
        order_ids[audit.pk] = int(match["order_id"] or match["bare_id"]) if match else None
    numbers = dict(
        Order.objects.for_tenant(tenant)
        .filter(pk__in=[i for i in order_ids.values() if i is not None])
        .values_list("id", "number")
    )
    result = []
    for audit in audits:
        order_id = order_ids[audit.pk]
        linked = order_id in numbers
        result.append(
            AuditRow(
                audit=audit,
                request=request_name(audit.endpoint),
                outcome=outcome_words(audit),
                order_label=number_label(numbers[order_id], order_id) if linked else None,
                order_url=reverse("dash-order", kwargs={"order_id": order_id}) if linked else None,
            )
        )
    return result


@member_required(Area.DUPLICATES)
@require_safe
def idempotency(request: HttpRequest) -> HttpResponse:
    tenant = tenant_of(request)
    tenant_key = str(tenant.pk)
    hours = hourly_hits(tenant_key=tenant_key, hours=HOURS)
    hits = sum(h.hits for h in hours)
    firsts = sum(h.first_executions for h in hours)
    totals = outcome_totals(tenant_key=tenant_key, since=timezone.now() - timedelta(hours=HOURS))
    return render_page(
        request,
        "dashboard/idempotency.html",
        {
            "chart": hit_rate_chart(hours),
            "hours": hours,
            "hits": hits,
            "first_executions": firsts,
            "hit_rate": f"{hits / (hits + firsts):.0%}" if hits + firsts else "—",
            "refused": totals["REUSED"],
            "stopped": totals["CONFLICT"] + totals["IN_PROGRESS"],
            "time_zone": tenant.time_zone,
            "duplicate_hits": rows(
                tenant, latest_audits(tenant_key=tenant_key, outcomes=["HIT"], limit=LATEST)
            ),
            "problems": rows(
                tenant,
                latest_audits(tenant_key=tenant_key, outcomes=PROBLEM_OUTCOMES, limit=LATEST),
            ),
        },
        section="idempotency",
    )
