"""``chrono executions list|show --tenant SLUG``: a tenant's executions (docs/cli.md)."""

from __future__ import annotations

import uuid

from chronoadmin.api.serializers import ExecutionSerializer
from chronoadmin.operator_cli import (
    Listing,
    NotFound,
    OperatorCommand,
    add_limit_argument,
    add_tenant_argument,
    tenant_by_slug,
)
from scheduler.models import Execution, ExecutionStatus

COLUMNS = ("execution_id", "job_id", "attempt", "status", "scheduled_for", "finished_at",
           "worker_id", "reason")


class Command(OperatorCommand):
    help = "List a tenant's executions, or show one with its error and traceback."
    actions = {
        "list": "list executions, latest scheduled first",
        "show": "one execution in full (its traceback included: an operator's view)",
    }

    def add_action_arguments(self, name, parser):
        add_tenant_argument(parser)
        if name == "list":
            parser.add_argument("--job", type=uuid.UUID, default=None, metavar="JOB_ID",
                                help="only this job's executions")
            parser.add_argument("--status", type=str.upper, choices=ExecutionStatus.values)
            add_limit_argument(parser)
        else:
            parser.add_argument("execution_id", type=uuid.UUID, metavar="EXECUTION_ID")

    def action_list(self, *, tenant: str, job, status, limit: int, **_):
        executions = Execution.objects.for_tenant(tenant_by_slug(tenant).tenant_id)
        if job is not None:
            executions = executions.filter(job_id=job)
        if status is not None:
            executions = executions.filter(status=status)
        rows = executions.order_by("-scheduled_for", "-pk")[:limit]
        return Listing([ExecutionSerializer(e).data for e in rows], COLUMNS)

    def action_show(self, *, tenant: str, execution_id: uuid.UUID, **_):
        owner = tenant_by_slug(tenant)
        execution = Execution.objects.for_tenant(owner.tenant_id).filter(
            execution_id=execution_id).first()
        if execution is None:
            raise NotFound(f"tenant {owner.slug} has no execution {execution_id}")
        return dict(ExecutionSerializer(execution).data) | {
            "traceback": execution.traceback or None}
