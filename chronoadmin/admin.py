"""Admin registration of tenants."""

from __future__ import annotations

from django.contrib import admin

from chronoadmin.models import Tenant

admin.site.site_header = "Chrono"
admin.site.site_title = "Chrono admin"
admin.site.index_title = "Jobs, executions and workers"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "is_active", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("tenant_id", "created_at")
