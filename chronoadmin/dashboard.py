"""The live dashboard (an admin page that refreshes itself) and the health endpoint."""

from __future__ import annotations

from datetime import timedelta

import redis
from django.db import DatabaseError, connection
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from reaper.models import Worker
from scheduler.api import timer_store
from scheduler.models import Execution, Job

RECENT_EXECUTIONS = 25


def dashboard_view(request: HttpRequest) -> HttpResponse:
    """Counts by status over the last 5 minutes, the latest executions, workers, timers."""
    since = timezone.now() - timedelta(minutes=5)
    executions = Execution.objects.filter(scheduled_for__gte=since)
    by_status = dict(
        executions.values_list("status").annotate(n=Count("execution_id")).order_by()
    )
    recent = list(
        Execution.objects.select_related("job").order_by("-scheduled_for")[:RECENT_EXECUTIONS]
    )
    for execution in recent:
        execution.lateness_ms = (
            None
            if execution.started_at is None
            else round((execution.started_at - execution.scheduled_for).total_seconds() * 1000)
        )
    try:
        pending_timers = timer_store().pending_count()
    except redis.RedisError:
        pending_timers = None
    context = {
        "title": "Live dashboard",
        "by_status": sorted(by_status.items()),
        "recent": recent,
        "workers": Worker.objects.order_by("-last_heartbeat_at")[:50],
        "jobs_by_status": sorted(
            Job.objects.values_list("status").annotate(n=Count("job_id")).order_by()
        ),
        "pending_timers": pending_timers,
        "refresh_s": 2,
    }
    return render(request, "chronoadmin/dashboard.html", context)


def health_view(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer, 503 naming the one that does not."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["postgresql"] = "ok"
    except DatabaseError as exc:
        checks["postgresql"] = f"error: {exc}"
    try:
        timer_store().client.ping()
        checks["redis"] = "ok"
    except redis.RedisError as exc:
        checks["redis"] = f"error: {exc}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"healthy": healthy, "checks": checks}, status=200 if healthy else 503)
