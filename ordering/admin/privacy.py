"""Staff admin of data-protection requests.

- Orders: "Erase the diners of the selected orders" (:func:`ordering.privacy.diners.erase_diner`
  for each distinct diner, logged as ``staff:<username>``), after a page listing the diners.
- Tenants: "Offboard selected tenants", which starts the offboarding as a Celery task (the
  archive goes to ``settings.OFFBOARDING_EXPORT_DIR``) once staff have typed each tenant's
  slug on its confirmation page; it needs the permission to delete tenants, and it is the only
  way a tenant is deleted here (no Delete page, no "Delete selected"). The tenants app
  knows nothing of orders, so the action is added here, to a subclass of its ``TenantAdmin``
  registered in its place.
- Erasure logs, logs of copies of diners' data given, and offboarding jobs: read-only. The
  logs are searched by diner id by hashing the query, since only the hash is kept; a job
  that stopped can be continued.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from idempotency.admin.audits import ReadOnlyAdmin
from idempotency.stores.nodes import REDIS_UNAVAILABLE
from ordering.admin.confirmation import Confirmation, confirmation_page, confirmed_form
from ordering.admin.orders import OrderAdmin
from ordering.background import dispatch
from ordering.models import DinerDataExport, DinerErasure, Order, TenantOffboarding
from ordering.privacy import diners as diner_privacy
from ordering.privacy.diners import PSEUDONYM_PREFIX, diner_hashes
from ordering.privacy.offboarding import OffboardingRefused, start_offboarding
from tenants.admin import TenantAdmin as BaseTenantAdmin
from tenants.models import Tenant

# One request erases them, each after the sessions' one wait: keep it well inside gunicorn's
# 30 s timeout. Each diner costs a pass over the tenant's stored replies and a scan of its Redis
# keys: 20 diners took 28 s with 200,000 of each, so a tenant that busy fits 10 in about 14 s.
MAX_DINERS_PER_ERASURE = 10


@admin.action(description="Erase the diners of the selected orders", permissions=["erase_diners"])
def erase_diners(
    modeladmin: OrderAdmin, request: HttpRequest, queryset: QuerySet[Order]
) -> TemplateResponse | None:
    """Shows the diners and their orders first; erases them once staff confirm."""
    diners = sorted(
        queryset.order_by()
        .exclude(diner_id="")
        .exclude(diner_id__startswith=PSEUDONYM_PREFIX)
        .values_list("tenant_id", "diner_id")
        .distinct()
    )
    if len(diners) > MAX_DINERS_PER_ERASURE:
        modeladmin.message_user(
            request,
            f"{len(diners)} diners selected; erase at most {MAX_DINERS_PER_ERASURE} at a time "
            "(or use manage.py erase_diner). Nothing was erased.",
            messages.ERROR,
        )
        return None
    form = confirmed_form(request, forms.Form)
    if not form.is_valid():
        return confirmation_page(
            modeladmin,
            request,
            action="erase_diners",
            pks=list(queryset.values_list("pk", flat=True)),
            form=form,
            page=Confirmation(
                title="Erase diners",
                consequence=(
                    "Every order, payment and stored answer of these diners will name a "
                    "pseudonym instead, their notes and contact details will be removed and "
                    "their sessions ended. This cannot be undone."
                ),
                headers=["Restaurant", "Diner", "Orders (all of the diner's)"],
                rows=_orders_of(diners),
                submit="Yes, erase these diners",
            ),
        )
    tenants = Tenant.objects.in_bulk({tenant_id for tenant_id, _ in diners})
    try:
        logs = diner_privacy.erase_diners(
            diners=[(tenants[tenant_id], diner) for tenant_id, diner in diners],
            requested_by=f"staff:{request.user.get_username()}",
        )
    except REDIS_UNAVAILABLE:
        modeladmin.message_user(request, diner_privacy.ERASURE_UNFINISHED, messages.ERROR)
        return None
    except diner_privacy.TenantLeaving as leaving:
        modeladmin.message_user(request, f"Nothing was erased: {leaving}", messages.ERROR)
        return None
    modeladmin.message_user(
        request,
        f"{len(logs)} diner(s) erased: {', '.join(log.pseudonym for log in logs) or 'none'}.",
        messages.SUCCESS,
    )
    return None


def _orders_of(diners: list[tuple[int, str]]) -> list[tuple[str, str, int]]:
    """Each selected (restaurant, diner) with how many orders the diner has there."""
    counts = Counter(
        Order.all_tenants.filter(
            tenant_id__in={t for t, _ in diners}, diner_id__in={d for _, d in diners}
        ).values_list("tenant_id", "diner_id")
    )
    slugs = dict(Tenant.objects.filter(pk__in={t for t, _ in diners}).values_list("pk", "slug"))
    return [(slugs[tenant_id], diner, counts[tenant_id, diner]) for tenant_id, diner in diners]


OrderAdmin.actions = [*OrderAdmin.actions, erase_diners]


admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantAdmin(BaseTenantAdmin):
    actions = [*BaseTenantAdmin.actions, "offboard"]

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        """Never: a restaurant leaves through its offboarding only. Django's Delete page and
        "Delete selected" cascaded through a restaurant with no orders (one opened here, no
        owner yet), skipping the archive and the removal of the engine's records and Redis
        keys, which have no foreign key to cascade through."""
        return False

    def has_offboard_permission(self, request: HttpRequest) -> bool:
        """The permission to delete tenants, which only offboarding carries out."""
        return request.user.has_perm("tenants.delete_tenant")

    @admin.action(
        description="Offboard selected tenants (export, then erase everything)",
        permissions=["offboard"],
    )
    def offboard(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> TemplateResponse | None:
        """Shows what goes and wants each tenant's slug typed before anything starts."""
        tenants = list(queryset.order_by("pk"))
        form = confirmed_form(request, OffboardConfirmForm, slugs=[t.slug for t in tenants])
        if not form.is_valid():
            orders = Counter(
                Order.all_tenants.filter(tenant__in=tenants).values_list("tenant_id", flat=True)
            )
            return confirmation_page(
                self,
                request,
                action="offboard",
                pks=[t.pk for t in tenants],
                form=form,
                page=Confirmation(
                    title="Offboard tenants",
                    consequence=(
                        "Each restaurant's data is exported to an archive, then everything it "
                        "has is erased: orders, payments, menu, keys, members and stored "
                        "answers. This cannot be undone."
                    ),
                    headers=["Slug", "Name", "Status", "Orders"],
                    rows=[(t.slug, t.name, t.status, orders[t.pk]) for t in tenants],
                    submit="Yes, offboard",
                ),
            )
        stamp = timezone.now().strftime("%Y%m%dT%H%M%S")
        for tenant in tenants:
            path = Path(settings.OFFBOARDING_EXPORT_DIR) / f"{tenant.slug}-{stamp}.zip"
            try:
                job = start_offboarding(
                    tenant=tenant,
                    export_path=path,
                    requested_by=f"staff:{request.user.get_username()}",
                )
            except OffboardingRefused as exc:
                self.message_user(request, str(exc), messages.WARNING)
                continue
            if send_offboarding(self, request, job):
                self.message_user(
                    request, f"Offboarding {job.pk} of {tenant.slug} started.", messages.SUCCESS
                )
        return None


class OffboardConfirmForm(forms.Form):
    """Staff type the slug of every tenant selected (a misclick names none of them)."""

    typed = forms.CharField(
        label="Slugs",
        max_length=2000,
        help_text="Type the slug of each tenant above, separated by spaces.",
    )

    def __init__(self, *args: Any, slugs: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slugs = slugs

    def clean_typed(self) -> str:
        typed = self.cleaned_data["typed"]
        if sorted(typed.replace(",", " ").split()) != sorted(self.slugs):
            raise forms.ValidationError("Type exactly the slugs of the selected tenants.")
        return typed


@admin.register(DinerErasure)
class DinerErasureAdmin(ReadOnlyAdmin):
    """The erasure log, a diner's rows found by the id typed, hashed as the log keeps it
    (under ``SECRET_KEY`` and its fallbacks: while the site's key rotates, an erasure logged
    under the old key is found too, as the erasure itself finds it)."""

    list_display = ["at", "tenant", "pseudonym", "requested_by", "counts"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["diner_hash"]
    search_help_text = "A diner id: it is hashed, the log keeps only the hash."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DinerErasure], search_term: str
    ) -> tuple[QuerySet[DinerErasure], bool]:
        if not search_term.strip():
            return queryset, False
        return queryset.filter(diner_hash__in=diner_hashes(search_term.strip())), False


@admin.register(DinerDataExport)
class DinerDataExportAdmin(ReadOnlyAdmin):
    """The log of copies of diners' data given out: who asked and when, never whose; staff
    find a diner's by typing the id, hashed as the log keeps it (under ``SECRET_KEY`` and its
    fallbacks, so a row from before a rotation of the key is found too)."""

    list_display = ["at", "tenant", "requested_by"]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["diner_hash"]
    search_help_text = "A diner id: it is hashed, the log keeps only the hash."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DinerDataExport], search_term: str
    ) -> tuple[QuerySet[DinerDataExport], bool]:
        if not search_term.strip():
            return queryset, False
        return queryset.filter(diner_hash__in=diner_hashes(search_term.strip())), False


@admin.register(TenantOffboarding)
class TenantOffboardingAdmin(ReadOnlyAdmin):
    list_display = [
        "tenant_slug",
        "phase",
        "batches",
        "requested_by",
        "created_at",
        "finished_at",
        "last_error",
    ]
    list_filter = ["phase"]
    search_fields = ["tenant_slug"]
    actions = ["resume"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and request.user.has_perm("tenants.delete_tenant")

    @admin.action(description="Continue selected jobs", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[TenantOffboarding]) -> None:
        jobs = list(queryset.exclude(phase=TenantOffboarding.Phase.DONE))
        sent = sum(send_offboarding(self, request, job) for job in jobs)
        self.message_user(request, f"{sent} job(s) continued.", messages.SUCCESS)


def send_offboarding(
    model_admin: admin.ModelAdmin, request: HttpRequest, job: TenantOffboarding
) -> bool:
    """Send the job's task; when the broker cannot take it, say so and that the job (already
    recorded) is continued from its list, instead of a server error. Sent or not."""
    try:
        dispatch.enqueue(dispatch.OFFBOARD_TENANT, job.pk)
    except Exception as exc:
        model_admin.message_user(
            request,
            f"Offboarding {job.pk} is recorded, but its task could not be sent now ({exc}). "
            "Continue it from the tenant offboardings' list once the task queue answers.",
            messages.WARNING,
        )
        return False
    return True
