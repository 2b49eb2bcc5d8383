"""URLs of ``/api/v1/``. ``jobs/bulk`` also answers without its trailing slash, as documented."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import DefaultRouter

from chronoadmin.api import schema  # noqa: F401 -- registers the schema extensions
from chronoadmin.api.calendars import CalendarViewSet
from chronoadmin.api.views import (
    ApiKeyViewSet,
    ExecutionViewSet,
    JobViewSet,
    TaskGrantViewSet,
    TenantAdminViewSet,
    WorkerViewSet,
)
from chronoadmin.api.workflows import WorkflowRunViewSet, WorkflowViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("executions", ExecutionViewSet, basename="execution")
router.register("calendars", CalendarViewSet, basename="calendar")
router.register("workers", WorkerViewSet, basename="worker")
router.register("tenants", TenantAdminViewSet, basename="tenant")
router.register("api-keys", ApiKeyViewSet, basename="api-key")
router.register("task-grants", TaskGrantViewSet, basename="task-grant")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("workflow-runs", WorkflowRunViewSet, basename="workflow-run")

urlpatterns = [
    path(
        "jobs/bulk",
        JobViewSet.as_view({"post": "bulk"}, **JobViewSet.bulk.kwargs),
        name="job-bulk-no-slash",
    ),
    *router.urls,
]
