"""Admin registration of tenants, their API keys, their task grants and their staff.

Tenant staff (:mod:`chronocore.staff`) see their own tenant's row, keys and grants; they issue
and revoke keys with the admin role; grants and memberships are changed by platform staff only
(a tenant granting itself tasks would defeat the grants)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils import timezone

from chronocore.models import (
    ApiKey,
    StaffRole,
    TaskGrant,
    Tenant,
    TenantMembership,
    generate_api_key,
    hash_api_key,
)
from chronocore.staff import TenantScopedAdmin, forget_scope, scope_of

admin.site.site_header = "Chrono"
admin.site.site_title = "Chrono admin"
admin.site.index_title = "Jobs, executions and workers"


class TaskGrantInline(admin.TabularInline):
    """A tenant's grants on its page: exact task and queue names or globs (``billing.*``)."""

    model = TaskGrant
    extra = 1
    fields = ("task_pattern", "queue_pattern", "created_by", "created_at")
    readonly_fields = ("created_by", "created_at")


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_column = "tenant_id"  # the row is the tenant
    tenant_change_role = None
    list_display = ("slug", "name", "is_active", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("tenant_id", "created_at")
    inlines = [TaskGrantInline]


@admin.register(TaskGrant)
class TaskGrantAdmin(TenantScopedAdmin):
    """Which tasks, on which queues, each tenant may schedule (docs/security.md). Tenant staff
    read their own; only platform staff grant."""

    tenant_change_role = None

    list_display = ("tenant", "task_pattern", "queue_pattern", "created_by", "created_at")
    list_filter = ("tenant",)
    search_fields = ("tenant__slug", "task_pattern", "queue_pattern")
    list_select_related = ("tenant",)
    readonly_fields = ("created_by", "created_at")

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = f"admin:{request.user.get_username()}"
        super().save_model(request, obj, form, change)


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Issue and revoke tenants' API keys. The key is shown once, on the page after "Save".
    A tenant's admins issue and revoke their own tenant's (the tenant is pinned)."""

    tenant_add_role = StaffRole.ADMIN
    tenant_change_role = StaffRole.ADMIN

    list_display = ("__str__", "tenant", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    search_fields = ("prefix", "name", "tenant__slug")
    list_select_related = ("tenant",)
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            if (not scope_of(request.user).platform
                    and self.tenants_to_add_for(request).count() == 1):
                return ("name",)  # their one tenant, set by save_model
            return ("tenant", "name")
        return ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("tenant", "prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request, obj, form, change):
        if not change:
            obj.prefix, full_key = generate_api_key()
            obj.key_hash = hash_api_key(full_key)
            obj.issued_key = full_key  # read by response_add, never stored
        super().save_model(request, obj, form, change)

    def response_add(self, request, obj, post_url_continue=None):
        return TemplateResponse(request, "admin/chronocore/apikey/issued.html", {
            **self.admin_site.each_context(request),
            "title": "API key issued",
            "api_key": obj,
            "full_key": obj.issued_key,
            "opts": self.model._meta,
        })

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke(self, request, queryset):
        revoked = self.acting_rows(request, queryset).filter(
            revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    """Who works for which tenant, with which role (``chrono tenant-staff`` does the same from
    a shell). Platform staff only: tenant staff do not add members."""

    list_display = ("user", "tenant", "role", "created_by", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "user__email", "tenant__slug")
    list_select_related = ("user", "tenant")
    readonly_fields = ("created_by", "created_at")
    autocomplete_fields = ("user",)

    def _platform(self, request) -> bool:
        return scope_of(request.user).platform

    def has_module_permission(self, request) -> bool:
        return self._platform(request) and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._platform(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request) -> bool:
        return self._platform(request) and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._platform(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._platform(request) and super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = f"admin:{request.user.get_username()}"
        super().save_model(request, obj, form, change)
        if not obj.user.is_staff:
            obj.user.is_staff = True  # a member signs in to the admin
            obj.user.save(update_fields=["is_staff"])
        forget_scope(obj.user)
