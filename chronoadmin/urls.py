"""URL map of the web process: the admin (with the live dashboard) and the API schema."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from chronoadmin.dashboard import dashboard_view, health_view

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="chrono-dashboard"),
    path("admin/", admin.site.urls),
    path("health/", health_view, name="chrono-health"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
