"""Admin registration of tenants, their API keys and their task grants."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils import timezone

from chronocore.models import ApiKey, TaskGrant, Tenant, generate_api_key, hash_api_key

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
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "is_active", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("tenant_id", "created_at")
    inlines = [TaskGrantInline]


@admin.register(TaskGrant)
class TaskGrantAdmin(admin.ModelAdmin):
    """Which tasks, on which queues, each tenant may schedule (docs/security.md)."""

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
class ApiKeyAdmin(admin.ModelAdmin):
    """Issue and revoke tenants' API keys. The key is shown once, on the page after "Save"."""

    list_display = ("__str__", "tenant", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    search_fields = ("prefix", "name", "tenant__slug")
    list_select_related = ("tenant",)
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
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

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)
