"""The owner's privacy page: erase one diner of this restaurant, and the log of erasures.

Not wrapped in ``@idempotent_form``: the erasure is idempotent by itself (a second run finds
nothing left and logs that), and a stored reply of this form would keep a fingerprint of the
very id being erased.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from idempotency.stores.nodes import REDIS_UNAVAILABLE
from ordering.dashboard.access import member_required, render_page, tenant_of
from ordering.dashboard.forms import EraseDinerForm
from ordering.models import DinerErasure, Order
from ordering.privacy.diners import ERASURE_UNFINISHED, erase_diner
from tenants.models import Tenant
from tenants.permissions import Area


@member_required(Area.PRIVACY)
@require_http_methods(["GET", "HEAD", "POST"])
def privacy(request: HttpRequest) -> HttpResponse:
    """GET: the form and the erasures of this restaurant. POST: erase a diner."""
    tenant = tenant_of(request)
    form = EraseDinerForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            log = erase_diner(
                tenant=tenant,
                diner_id=form.cleaned_data["diner_id"],
                requested_by=f"owner:{request.user.get_username()}",
            )
        except REDIS_UNAVAILABLE:
            messages.error(request, ERASURE_UNFINISHED)
            return redirect("dash-privacy")
        if any(log.counts.values()):
            messages.success(
                request,
                f"Diner erased: {log.counts['orders']} order(s) now show {log.pseudonym}; "
                f"{log.counts['records']} stored replies and {log.counts['sessions']} "
                "session(s) removed.",
            )
        else:  # a second submit, or an id this restaurant never saw: not "0 orders erased"
            messages.info(request, _nothing_left(tenant, log))
        return redirect("dash-privacy")
    return render_page(
        request,
        "dashboard/privacy.html",
        {"form": form, "erasures": DinerErasure.objects.filter(tenant=tenant)[:50]},
        section="privacy",
        status=400 if form.is_bound else 200,
    )


def _nothing_left(tenant: Tenant, log: DinerErasure) -> str:
    """What an erasure that found nothing says: the diner was erased before (a double click,
    whose page shows the second press's answer, or a request handled twice), with the
    pseudonym their orders carry; or no diner of this restaurant had that id (a typo?). Said
    as one ("erased already, or never a diner"), the owner could not tell their erasure had
    happened. An erasure running at the same instant has committed its orders by the time
    this one found none to rename, so they are counted here."""
    orders = Order.objects.for_tenant(tenant).filter(diner_id=log.pseudonym).count()
    erased_before = (
        DinerErasure.objects.filter(tenant=tenant, diner_hash=log.diner_hash)
        .exclude(pk=log.pk)
        .exists()
    )
    if orders or erased_before:
        return (
            f"This diner is erased: {orders} order(s) show {log.pseudonym}. Nothing was left "
            "to erase now."
        )
    return (
        "Nothing to erase: no orders, stored replies or sessions of this restaurant name this "
        "diner id. Check the id."
    )
