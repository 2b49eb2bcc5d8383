"""``chrono jobs list|show|pause|resume|trigger|cancel|load --tenant SLUG``: a tenant's jobs,
changed through :mod:`scheduler.api` (the calls the REST API and the admin make, audited with
the operating-system user as actor), and loaded in bulk from a JSON-lines file through the REST
API's bulk path (:func:`chronoadmin.api.bulk.ingest`: the same rules, grants, quota and COPY);
docs/cli.md."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import orjson

from chronoadmin.api import bulk
from chronoadmin.api.errors import QuotaExceeded
from chronoadmin.api.parsers import MalformedLine, may_hold_wide_integer
from chronoadmin.api.serializers import JobDetailSerializer, JobSerializer
from chronoadmin.operator_cli import (
    Conflict,
    Invalid,
    Listing,
    NotFound,
    OperatorCommand,
    PartlyDone,
    Report,
    actor,
    add_limit_argument,
    add_tenant_argument,
    tenant_by_slug,
)
from chronocore.config import get_config  # a command is the process edge: the bulk limit
from chronocore.progress import progress_bar
from scheduler import api, job_writer
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
        "load": "create jobs from a JSON-lines file (one job a line, as POST /api/v1/jobs/bulk)",
    }

    def add_action_arguments(self, name, parser):
        add_tenant_argument(parser)
        if name == "list":
            parser.add_argument("--status", type=str.upper, choices=JobStatus.values)
            parser.add_argument("--task", default=None, help="only jobs of this task name")
            parser.add_argument("--queue", default=None, help="only jobs on this queue")
            add_limit_argument(parser)
        elif name == "load":
            parser.add_argument("file", metavar="FILE", help="JSON lines ('-': standard input)")
            parser.add_argument("--batch", type=int, default=None, metavar="N",
                                help="jobs per transaction (default and most: "
                                     "CHRONO_BULK_MAX_ITEMS)")
            parser.add_argument("--no-progress", action="store_false", dest="progress",
                                help="draw no progress bar (none is drawn off a terminal)")
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

    def action_load(self, *, tenant: str, file: str, batch: int | None, progress: bool, **_):
        owner = tenant_by_slug(tenant)
        most = get_config().bulk_max_items
        if batch is not None and not 1 <= batch <= most:
            raise Invalid(f"--batch {batch}: use 1 to {most} (CHRONO_BULK_MAX_ITEMS)")
        lines = _read_lines(file)
        report = {"created": 0, "failed": 0, "ids": [], "errors": []}
        size = batch or most
        with progress_bar("jobs", total=len(lines), enabled=progress) as advance:
            for start in range(0, len(lines), size):
                chunk = lines[start:start + size]
                try:
                    result = bulk.ingest(owner.tenant_id, [item for _, item in chunk],
                                         job_writer.current_limits())
                except QuotaExceeded as exc:
                    raise Conflict(f"{exc.detail} ({report['created']} jobs of the first "
                                   f"{start} lines were created)") from None
                report["created"] += result.created
                report["failed"] += len(chunk) - result.created
                report["ids"] += result.ids
                report["errors"] += [{"line": chunk[error["index"]][0], "field": error["field"],
                                      "message": error["message"]} for error in result.errors]
                advance(len(chunk))
        if report["failed"]:
            return Report(report, PartlyDone(
                f"{report['failed']} of {len(lines)} jobs refused (see the report's errors); "
                f"{report['created']} created"))
        return report

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


def _read_lines(file: str) -> list[tuple[int, object]]:
    """``(line number, job)`` of every non-blank line; a line that is not JSON is a
    MalformedLine, refused as its item (as the bulk endpoint's NDJSON)."""
    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise NotFound(f"cannot read {file}: {exc.strerror}") from None
    items = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            # The standard library keeps an integer wider than 64 bits exact (orjson makes it
            # a float), so validation names it instead of storing a float.
            item = json.loads(line) if may_hold_wide_integer(line) else orjson.loads(line)
        except ValueError as exc:
            item = MalformedLine(f"line {number} is not valid JSON: {exc}")
        items.append((number, item))
    return items
