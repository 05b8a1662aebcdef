"""Coupons: list, create, deactivate (deactivation is final for new orders; used counts stay)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import found, member_required, render_page, save_posted, tenant_of
from ordering.dashboard.forms import CouponCreateForm
from ordering.dashboard.retired_rows import live_and_newest_retired
from ordering.selectors import active_coupons_of, coupon_of, inactive_coupons_newest_first
from ordering.services.menu import MenuError, create_coupon, deactivate_coupon
from tenants.permissions import Area


@member_required(Area.COUPONS)
@require_http_methods(["GET", "HEAD", "POST"])
@idempotent_form(fields=("code", "kind", "value", "max_uses", "valid_until"))
def coupons(request: HttpRequest) -> HttpResponse:
    """GET: the coupons and a "new coupon" form. POST: create it, or show the form's errors."""
    tenant = tenant_of(request)
    form = CouponCreateForm(request.POST if request.method == "POST" else None)
    coupon = save_posted(request, form, lambda data: create_coupon(tenant=tenant, **data))
    if coupon is not None:
        messages.success(request, f"Created coupon {coupon.code}.")
        return redirect("dash-coupons")
    return render_page(
        request,
        "dashboard/coupons.html",
        {
            "coupons": live_and_newest_retired(
                active_coupons_of(tenant=tenant), inactive_coupons_newest_first(tenant=tenant)
            ),
            "form": form,
        },
        section="coupons",
        status=400 if form.is_bound else 200,
    )


@member_required(Area.COUPONS)
@require_POST
@idempotent_form(fields=(), form_page="dash-coupons")
def coupon_deactivate(request: HttpRequest, coupon_id: int) -> HttpResponse:
    tenant = tenant_of(request)
    found(coupon_of(tenant=tenant, coupon_id=coupon_id))
    try:
        coupon, changed = deactivate_coupon(tenant=tenant, coupon_id=coupon_id)
    except MenuError as exc:
        raise Http404(exc.message) from exc
    if changed:
        messages.success(request, f"Coupon {coupon.code} no longer applies to new orders.")
    else:
        messages.info(request, f"Coupon {coupon.code} was deactivated already; nothing changed.")
    return redirect("dash-coupons")
