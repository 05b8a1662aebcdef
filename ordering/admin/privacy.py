"""Staff admin of data-protection requests.

- Orders: "Erase the diners of the selected orders" (:func:`ordering.privacy.diners.erase_diner`
  for each distinct diner, logged as ``staff:<username>``).
- Tenants: "Offboard selected tenants", which starts the offboarding as a Celery task (the
  archive goes to ``settings.OFFBOARDING_EXPORT_DIR``); it needs the permission to delete
  tenants. The tenants app knows nothing of orders, so the action is added here, to a subclass
  of its ``TenantAdmin`` registered in its place.
- Erasure logs and offboarding jobs: read-only. The erasure log is searched by diner id by
  hashing the query, since only the hash is kept; a job that stopped can be continued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from idempotency.admin.audits import ReadOnlyAdmin
from ordering.admin.orders import OrderAdmin
from ordering.background import dispatch
from ordering.models import DinerErasure, Order, TenantOffboarding
from ordering.privacy.diners import PSEUDONYM_PREFIX, diner_hash, erase_diner
from ordering.privacy.offboarding import OffboardingRefused, start_offboarding
from tenants.admin import TenantAdmin as BaseTenantAdmin
from tenants.models import Tenant


@admin.action(description="Erase the diners of the selected orders", permissions=["change"])
def erase_diners(modeladmin: OrderAdmin, request: HttpRequest, queryset: QuerySet[Order]) -> None:
    who = f"staff:{request.user.get_username()}"
    diners = (
        queryset.order_by()
        .exclude(diner_id="")
        .exclude(diner_id__startswith=PSEUDONYM_PREFIX)
        .values_list("tenant_id", "diner_id")
        .distinct()
    )
    logs = [
        erase_diner(tenant=Tenant.objects.get(pk=tenant_id), diner_id=diner, requested_by=who)
        for tenant_id, diner in sorted(diners)
    ]
    modeladmin.message_user(
        request,
        f"{len(logs)} diner(s) erased: {', '.join(log.pseudonym for log in logs) or 'none'}.",
        messages.SUCCESS,
    )


OrderAdmin.actions = [*OrderAdmin.actions, erase_diners]


admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantAdmin(BaseTenantAdmin):
    actions = [*BaseTenantAdmin.actions, "offboard"]

    @admin.action(
        description="Offboard selected tenants (export, then erase everything)",
        permissions=["delete"],
    )
    def offboard(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        stamp = timezone.now().strftime("%Y%m%dT%H%M%S")
        for tenant in queryset.order_by("pk"):
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
            dispatch.enqueue(dispatch.OFFBOARD_TENANT, job.pk)
            self.message_user(
                request, f"Offboarding {job.pk} of {tenant.slug} started.", messages.SUCCESS
            )


@admin.register(DinerErasure)
class DinerErasureAdmin(ReadOnlyAdmin):
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
        return queryset.filter(diner_hash=diner_hash(search_term.strip())), False


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
        for job in jobs:
            dispatch.enqueue(dispatch.OFFBOARD_TENANT, job.pk)
        self.message_user(request, f"{len(jobs)} job(s) continued.", messages.SUCCESS)
