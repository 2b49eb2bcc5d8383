"""URL map of the web process: the admin (with the live dashboard), the REST API, its schema
and its documentation pages (Swagger UI, ReDoc), and the pages for errors no view answers."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from chronoadmin.dashboard import dashboard_data_view, dashboard_view
from chronoadmin.health import health_view, live_view
from chronoadmin.metrics import metrics_view
from search.api import AuditSearchView, LogSearchView
from search.views import audit_admin_view

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="chrono-dashboard"),
    path("admin/dashboard/data/", admin.site.admin_view(dashboard_data_view),
         name="chrono-dashboard-data"),
    path("admin/audit/", admin.site.admin_view(audit_admin_view), name="chrono-audit"),
    path("admin/", admin.site.urls),
    path("health/", health_view, name="chrono-health"),
    re_path(r"^health/live/?$", live_view, name="chrono-live"),
    path("metrics", metrics_view, name="chrono-metrics"),
    path("api/v1/audit/", AuditSearchView.as_view(), name="audit-search"),
    path("api/v1/logs/", LogSearchView.as_view(), name="logs-search"),
    path("api/v1/", include("chronoadmin.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
]

handler404 = "chronoadmin.error_pages.not_found"
handler500 = "chronoadmin.error_pages.server_error"
