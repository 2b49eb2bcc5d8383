"""``chrono jobs list|pause|resume|trigger|cancel --tenant SLUG``: a tenant's jobs, changed
through :mod:`scheduler.api` (the calls the REST API and the admin make, audited with the
operating-system user as actor; docs/cli.md)."""

from __future__ import annotations

import uuid

from chronoadmin.api.serializers import JobDetailSerializer, JobSerializer
from chronoadmin.operator_cli import (
    Conflict,
    Listing,
    NotFound,
    OperatorCommand,
    actor,
    add_limit_argument,
    add_tenant_argument,
    tenant_by_slug,
)
from scheduler import api
from scheduler.errors import JobNotFound
from scheduler.models import Job, JobStatus

COLUMNS = ("job_id", "name", "job_type", "status", "cron_expression", "next_run_at", "queue")
# action -> (the call, the status it needs, the past tense)
ACTIONS = {
    "pause": (api.pause, "ACTIVE", "paused"),
    "resume": (api.resume, "PAUSED", "resumed"),
    "trigger": (api.trigger, "ACTIVE", "triggered"),
    "cancel": (api.cancel, "ACTIVE or PAUSED (or with executions not ended)", "cancelled"),
}


class Command(OperatorCommand):
    help = "List a tenant's jobs; pause, resume, trigger (run now) or cancel one."
    actions = {
        "list": "list the tenant's jobs, newest first",
        "show": "show one job with its next fire times",
        "pause": "stop firing an ACTIVE job until resumed",
        "resume": "fire a PAUSED job again (missed occurrences follow its misfire policy)",
        "trigger": "fire an ACTIVE job now, once",
        "cancel": "cancel a job: nothing more fires, running executions are stopped",
    }

    def add_action_arguments(self, name, parser):
        add_tenant_argument(parser)
        if name == "list":
            parser.add_argument("--status", type=str.upper, choices=JobStatus.values)
            parser.add_argument("--task", default=None, help="only jobs of this task name")
            parser.add_argument("--queue", default=None, help="only jobs on this queue")
            add_limit_argument(parser)
        else:
            parser.add_argument("job_id", type=uuid.UUID, metavar="JOB_ID")

    def action_list(self, *, tenant: str, status, task, queue, limit: int, **_):
        jobs = Job.objects.for_tenant(tenant_by_slug(tenant).tenant_id)
        for name, value in (("status", status), ("job_type", task), ("queue", queue)):
            if value is not None:
                jobs = jobs.filter(**{name: value})
        rows = jobs.order_by("-created_at", "-pk")[:limit]
        return Listing([JobSerializer(job).data for job in rows], COLUMNS)

    def action_show(self, *, tenant: str, job_id: uuid.UUID, **_):
        job = Job.objects.for_tenant(tenant_by_slug(tenant).tenant_id).filter(
            job_id=job_id).first()
        if job is None:
            raise NotFound(f"tenant {tenant} has no job {job_id}")
        return JobDetailSerializer(job).data

    def action_pause(self, **options):
        return self._change("pause", **options)

    def action_resume(self, **options):
        return self._change("resume", **options)

    def action_trigger(self, **options):
        return self._change("trigger", **options)

    def action_cancel(self, **options):
        return self._change("cancel", **options)

    def _change(self, action: str, *, tenant: str, job_id: uuid.UUID, **_):
        owner = tenant_by_slug(tenant)
        call, needs, done = ACTIONS[action]
        try:
            changed = call(job_id, tenant=owner, by=actor())
        except JobNotFound:
            raise NotFound(f"tenant {owner.slug} has no job {job_id}") from None
        job = Job.objects.for_tenant(owner.tenant_id).get(job_id=job_id)
        if not changed:
            raise Conflict(f"job {job_id} is {job.status}: only a job {needs} can be {done}; "
                           "nothing changed")
        return {"result": done, **JobSerializer(job).data}
