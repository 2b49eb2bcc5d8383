"""Workflow definitions, runs, and the two tables that tie runs to Chrono's jobs.

A run's state (every step's status, attempt, result and reason, :class:`workflows.runs.RunState`)
is one JSON document on its row, changed only under the row's lock by the engine
(:mod:`workflows.engine`), so a join is always decided from every parent's state at once and
never expires. Each attempt of a step runs as a one-time Chrono job (``WorkflowTask`` says which
step of which run it is), fired by the beat and run by an ordinary worker; when its execution
ends, the statement that ends it also writes a :class:`scheduler.models.ExecutionEnd` (the job is
watched), which the engine applies to the run and deletes in one transaction: nothing advances
twice, nothing is lost between.
"""

from __future__ import annotations

import uuid

from django.db import models

from chronocore.models import Tenant
from workflows.states import RunStatus


class WorkflowDefinitionVersion(models.Model):
    """One version of a named workflow of a tenant; a run is pinned to the version it started
    with. Defining the same workflow again with an identical spec makes no new version."""

    definition_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workflows")
    name = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    spec = models.JSONField(help_text="The definition as accepted (WorkflowDefinition.to_dict).")
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "chrono_workflow_definition"
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name", "version"],
                                    name="workflow_definition_version"),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


# The run statuses of the pure core (workflows.states.RunStatus), plus QUEUED: a run waiting for
# its definition's concurrency limit, which the engine keeps before the evaluator sees the run.
WorkflowRunStatus = models.TextChoices(
    "WorkflowRunStatus", [("QUEUED", "QUEUED"), *((s.value, s.value) for s in RunStatus)])


class WorkflowRun(models.Model):
    run_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workflow_runs")
    # No index of its own: workflow_run_definition_idx starts with it.
    definition = models.ForeignKey(WorkflowDefinitionVersion, on_delete=models.PROTECT,
                                   related_name="runs", db_index=False)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=WorkflowRunStatus.choices)
    input = models.JSONField(null=True, blank=True)
    state = models.JSONField(help_text="workflows.runs.RunState, as the engine keeps it.")
    state_version = models.PositiveIntegerField(default=0)
    reason = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    queue = models.CharField(max_length=200, help_text="The queue of steps that name none.")
    parent_run_id = models.UUIDField(null=True, blank=True)
    parent_step = models.CharField(max_length=220, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "chrono_workflow_run"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "idempotency_key"],
                                    condition=models.Q(idempotency_key__isnull=False),
                                    name="workflow_run_idempotency_key"),
        ]
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="workflow_run_tenant_idx"),
            models.Index(fields=["tenant", "name", "status"], name="workflow_run_name_idx"),
            # A definition's last runs, newest first (the admin's runs × steps grid).
            models.Index(fields=["definition", "-created_at"],
                         name="workflow_run_definition_idx"),
            models.Index(fields=["deadline_at"], name="workflow_run_deadline_idx",
                         condition=models.Q(status="RUNNING", deadline_at__isnull=False)),
            models.Index(fields=["parent_run_id"], name="workflow_run_parent_idx",
                         condition=models.Q(parent_run_id__isnull=False)),
            # Finished runs, oldest first, for the retention pass (workflows.retention).
            models.Index(fields=["finished_at"], name="workflow_run_finished_idx",
                         condition=models.Q(finished_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.run_id} [{self.status}]"


class WorkflowTask(models.Model):
    """The one-time job that runs one attempt of one step (or map instance) of a run."""

    job_id = models.UUIDField(primary_key=True)
    run_id = models.UUIDField(db_index=True)
    step_key = models.CharField(max_length=200)
    map_index = models.IntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField()

    class Meta:
        db_table = "chrono_workflow_task"

    def __str__(self) -> str:
        index = "" if self.map_index is None else f"[{self.map_index}]"
        return f"{self.run_id} {self.step_key}{index} #{self.attempt}"
