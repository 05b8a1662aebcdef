"""Staff admin for tenants, memberships and API clients (secrets are never shown)."""

from django.contrib import admin

from tenants.models import ApiClient, Membership, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "region", "status", "created_at"]
    list_filter = ["status", "region"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ["prefix", "tenant", "name", "kind", "is_test", "last_used_at", "revoked_at"]
    list_filter = ["kind", "is_test", "tenant"]
    search_fields = ["prefix", "name", "tenant__slug"]
    readonly_fields = ["prefix", "secret_hash", "created_at", "last_used_at"]
