"""The owner's privacy page: erase one diner of this restaurant, download a diner's copy of
their data, and the log of erasures.

Neither form is wrapped in ``@idempotent_form``: the erasure is idempotent by itself (a second
run finds nothing left and logs that), and a stored reply of either form would keep a
fingerprint of the diner's id, or, for a download, a second copy of the diner's data.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from idempotency.stores.nodes import REDIS_UNAVAILABLE
from ordering.dashboard.access import member_required, render_page, tenant_of
from ordering.dashboard.forms import EraseDinerForm, ExportDinerForm
from ordering.models import DinerDataExport, DinerErasure, Order
from ordering.privacy.diner_export import diner_export_chunks, log_export, rows_kept
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
            # the orders showing the pseudonym, not the ones this submit renamed: a submit
            # that finished one a Redis node had stopped found them renamed already
            shown = Order.objects.for_tenant(tenant).filter(diner_id=log.pseudonym).count()
            messages.success(
                request,
                f"Diner erased: {shown} order(s) now show {log.pseudonym}; "
                f"{log.counts['records']} stored replies and {log.counts['sessions']} "
                "session(s) removed.",
            )
        else:  # a second submit, or an id this restaurant never saw: not "0 orders erased"
            messages.info(request, _nothing_left(tenant, log))
        return redirect("dash-privacy")
    return _page(request, form=form, status=400 if form.is_bound else 200)


# The most rows (orders, sessions, stored replies, audits) a copy written by the page holds.
# The page writes it within one request, which gunicorn ends after GUNICORN_TIMEOUT (30 s):
# a copy cut there reached the owner as a 200 with half a JSON file. About 1 ms a row on a
# small server: 5,000 rows take a few seconds. A larger one is the command's (no time limit).
PAGE_MAX_ROWS = 5_000


@member_required(Area.PRIVACY)
@require_POST
def privacy_export(request: HttpRequest) -> HttpResponse:
    """POST: the diner's copy of their data, a JSON attachment written as it is read (a diner
    with many orders costs one batch of memory). A POST, not a GET with the id in its query:
    the id stays out of the address bar, the history and every access log, and the CSRF check
    keeps another site from making an owner's browser download (and log) a copy. A bad id is
    the form's error on the page. Each copy is logged before it is written (``log_export``)."""
    tenant = tenant_of(request)
    form = ExportDinerForm(request.POST)
    if not form.is_valid():
        return _page(request, export_form=form, status=400)
    diner_id = form.cleaned_data["diner_id"]
    rows = rows_kept(tenant, diner_id)
    if rows > PAGE_MAX_ROWS:
        form.add_error(
            "diner_id",
            f"This diner has {rows} records here, more than this page writes in one go "
            f"({PAGE_MAX_ROWS}). Ask your platform operator for the copy: manage.py "
            f"export_diner {tenant.slug} <diner id> writes it whole.",
        )
        return _page(request, export_form=form, status=400)
    chunks = diner_export_chunks(tenant, diner_id)
    log_export(
        tenant=tenant, diner_id=diner_id, requested_by=f"owner:{request.user.get_username()}"
    )
    response = StreamingHttpResponse(
        (chunk.encode() for chunk in chunks), content_type="application/json; charset=utf-8"
    )
    day = timezone.localdate(timezone=tenant.zone).isoformat()
    response["Content-Disposition"] = f'attachment; filename="diner-{tenant.slug}-{day}.json"'
    response["Cache-Control"] = "no-store"
    return response


def _page(
    request: HttpRequest,
    *,
    form: EraseDinerForm | None = None,
    export_form: ExportDinerForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page with both forms (the one sent back with its errors), the erasure log and the
    log of copies given (who and when; never whose)."""
    return render_page(
        request,
        "dashboard/privacy.html",
        {
            "form": EraseDinerForm() if form is None else form,
            "export_form": ExportDinerForm() if export_form is None else export_form,
            "erasures": DinerErasure.objects.filter(tenant=tenant_of(request))[:50],
            "exports": DinerDataExport.objects.filter(tenant=tenant_of(request))[:50],
        },
        section="privacy",
        status=status,
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
