"""``chrono demo``: a demo tenant whose jobs run, the platform started, executions shown live."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from chronoadmin.management.commands.dev import (
    DEV_WORKER_PREFIX,
    WEB_ADDR,
    run_until_interrupted,
    start_platform,
)
from chronocore import grants

# get_config() here: a command is the process edge (the demo's queue).
from chronocore.config import get_config
from chronocore.models import Tenant
from localservices.processes import wait_until
from reaper.models import Worker
from scheduler import api
from scheduler.models import Execution
from workflows import engine

ADMIN_USER = "admin"
ADMIN_PASSWORD = "chrono-demo"  # a loopback-only demo; production admins are created by hand
WORKER_READY_TIMEOUT_S = 60

CRON_JOBS = [
    # (idempotency key, task, cron, time zone, kwargs)
    ("demo-every-5s", "chrono.demo.report", "*/5 * * * * *", "UTC", {"report": "every-5s"}),
    ("demo-every-7s", "chrono.echo", "*/7 * * * * *", "Europe/Paris", {"from": "Paris"}),
    ("demo-every-minute", "chrono.demo.report", "0 * * * * *", "America/New_York",
     {"report": "minutely"}),
]
# The built-in tasks the demo's jobs and workflow run: granted to the demo tenant, on the
# default queue, only (built-in tasks are granted to nobody by default).
DEMO_TASKS = ("chrono.demo.report", "chrono.echo", "chrono.fail", "chrono.sleep",
              "chrono.start_workflow")


# A small ETL workflow of built-in tasks, started once now and then every minute by a cron job
# running the built-in chrono.start_workflow.
DEMO_WORKFLOW = {
    "name": "demo-etl",
    "steps": [
        {"key": "extract", "task": "chrono.sleep", "kwargs": {"seconds": 2}},
        {"key": "transform", "task": "chrono.echo", "parents": ["extract"],
         "kwargs": {"rows": [1, 2, 3]}},
        {"key": "load", "kind": "map", "task": "chrono.echo", "parents": ["transform"],
         "map_over": "steps.transform.result.kwargs.rows",
         "kwargs": {"row": {"$ref": "map.item"}}},
        {"key": "report", "task": "chrono.echo", "parents": ["extract"],
         "condition": "input.send_report", "kwargs": {"report": "daily"}},
        {"key": "total", "kind": "fan_in", "task": "chrono.echo", "parents": ["load"]},
        {"key": "notify", "task": "chrono.echo", "parents": ["total", "report"],
         "trigger_rule": "none_failed_min_one_success", "kwargs": {"done": True}},
    ],
}


class Command(BaseCommand):
    help = "Create a demo tenant with cron and one-time jobs, start the platform, show executions."

    def handle(self, *args, **options):
        tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo Corp"})
        for task_name in DEMO_TASKS:  # built-in tasks are granted to nobody but the demo
            grants.grant(tenant, task_name, get_config().default_queue, by="chrono demo")
        self._admin_user()
        for key, task, cron, tz, kwargs in CRON_JOBS:
            api.schedule_cron(task, tenant=tenant, cron=cron, timezone=tz, kwargs=kwargs,
                              name=key, idempotency_key=key)
        engine.define(tenant, DEMO_WORKFLOW, by="demo")
        api.schedule_cron("chrono.start_workflow", tenant=tenant, cron="30 * * * * *",
                          kwargs={"workflow": "demo-etl", "run_input": {"send_report": True}},
                          name="demo-etl every minute", idempotency_key="demo-etl-cron")

        self.stdout.write("Starting beat, worker and web server:")
        starting = timezone.now()
        group = start_platform(self.stdout)
        # The one-time jobs are due a few seconds after the worker consumes, not after this
        # command began: scheduled before, the first ones waited out the worker's start-up
        # and showed it as their lateness (1.3-2.3 s) rather than Chrono's.
        if not _worker_ready_since(starting):
            self.stdout.write(f"  the worker sent no heartbeat in {WORKER_READY_TIMEOUT_S} s "
                              "(see its log): the one-time jobs below may start late")
        for seconds in (3, 10, 20):
            api.schedule_once("chrono.echo", tenant=tenant, delay=seconds,
                              kwargs={"one_time": f"+{seconds}s"}, name=f"one-time +{seconds}s")
        api.schedule_once("chrono.fail", tenant=tenant, delay=15, name="one-time that fails")
        api.schedule_once("chrono.start_workflow", tenant=tenant, delay=2,
                          kwargs={"workflow": "demo-etl", "run_input": {"send_report": False}},
                          name="demo-etl once")
        self.stdout.write(
            f"\nChrono demo is up.\n"
            f"  admin      http://{WEB_ADDR}/admin/   "
            f"user {ADMIN_USER}  password {ADMIN_PASSWORD}\n"
            f"  dashboard  http://{WEB_ADDR}/admin/dashboard/\n"
            f"  workflows  http://{WEB_ADDR}/admin/workflows/workflowrun/\n"
            f"  API schema http://{WEB_ADDR}/api/schema/\n"
            f"Executions as they finish (Ctrl-C stops everything):\n"
        )
        seen: set = set()
        since = timezone.now() - timedelta(seconds=1)
        run_until_interrupted(group, on_tick=lambda: self._show_new(tenant, since, seen))
        self.stdout.write("demo stopped")

    def _admin_user(self) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=ADMIN_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_password(ADMIN_PASSWORD)
            user.save()

    def _show_new(self, tenant: Tenant, since, seen: set) -> None:
        finished = (
            Execution.objects.for_tenant(tenant)
            .filter(scheduled_for__gte=since, finished_at__isnull=False)
            .exclude(execution_id__in=seen)
            .select_related("job")
            .order_by("scheduled_for")[:50]
        )
        for e in finished:
            seen.add(e.execution_id)
            self.stdout.write(
                f"  {e.scheduled_for:%H:%M:%S}  {e.status:<9} {e.job.job_type:<20} "
                f"{e.job.name:<22} {_what_happened(e)}"
            )


def _worker_ready_since(moment, *, timeout_s: float = WORKER_READY_TIMEOUT_S) -> bool:
    """Whether the demo's worker sent a heartbeat at or after ``moment`` within ``timeout_s``:
    its first comes once its consumer runs (``scheduler.heartbeats``)."""
    beats = Worker.objects.filter(worker_id__startswith=DEV_WORKER_PREFIX,
                                  last_heartbeat_at__gte=moment)
    return wait_until(beats.exists, timeout_s=timeout_s, interval_s=0.2)


def _what_happened(execution: Execution) -> str:
    """How an ended execution went: when it started and where, or why it never ran (an
    occurrence skipped by a misfire or overlap policy, or cancelled before it started)."""
    if execution.started_at is None:
        return f"did not run: {execution.reason or execution.status.lower()}"
    late = round((execution.started_at - execution.scheduled_for).total_seconds() * 1000)
    return f"started {late:>4} ms late on {execution.worker_id}"
