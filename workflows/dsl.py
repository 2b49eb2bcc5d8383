"""Workflows defined in Python, next to the Celery tasks they run::

    from workflows.dsl import Workflow, ref

    etl = Workflow("nightly-etl", run_timeout_s=3600)
    extract = etl.step("extract", tasks.extract, kwargs={"day": ref("input.day")},
                       retry={"max_attempts": 3, "initial_delay_ms": 1000})
    load = etl.map("load", tasks.load_one, parents=[extract],
                   over="steps.extract.result.rows", kwargs={"row": ref("map.item")})
    etl.fan_in("total", tasks.total, parents=[load])
    etl.step("notify", "etl.notify", parents=["total"], trigger_rule="all_done")

    etl.define(tenant="acme")                       # a new version when the spec changed
    run = etl.start(tenant="acme", run_input={"day": "2026-12-01"}, idempotency_key="etl-1201")
    run_status(run.run_id, tenant="acme")           # every step's state

A task is a Celery task object (its ``name`` is used) or a task name; a parent is a step
returned by this builder or a key. The builder only writes the JSON form
(:meth:`Workflow.to_dict`) that the REST API takes, so both are validated by the same rules,
with the same field paths in their errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chronocore.models import Tenant
from workflows import engine
from workflows.inspection import run_steps
from workflows.models import WorkflowDefinitionVersion, WorkflowRun


def ref(path: str, default: Any = ...) -> dict[str, Any]:
    """A reference to the run's input or an ancestor's result (``"input.day"``,
    ``"steps.extract.result.rows"``, ``"map.item"``), resolved when the step is dispatched."""
    return {"$ref": path} if default is ... else {"$ref": path, "default": default}


@dataclass(frozen=True)
class StepHandle:
    """A step added to a :class:`Workflow`; pass it as a parent of later steps."""

    key: str


def _task_name(task: Any) -> str:
    return task if isinstance(task, str) else task.name


def _keys(parents: list[StepHandle | str] | None) -> list[str]:
    return [p.key if isinstance(p, StepHandle) else p for p in parents or ()]


class Workflow:
    """A workflow definition built step by step."""

    def __init__(self, name: str, *, run_timeout_s: float | None = None,
                 max_concurrent_runs: int | None = None, description: str = "") -> None:
        self.name = name
        self.options: dict[str, Any] = {"run_timeout_s": run_timeout_s,
                                        "max_concurrent_runs": max_concurrent_runs,
                                        "description": description}
        self.steps: list[dict[str, Any]] = []

    def _add(self, key: str, fields: dict[str, Any]) -> StepHandle:
        self.steps.append({"key": key, **{k: v for k, v in fields.items() if v is not None}})
        return StepHandle(key)

    def step(self, key: str, task: Any, *, parents: list[StepHandle | str] | None = None,
             args: list | None = None, kwargs: dict | None = None, trigger_rule: str | None = None,
             condition: str | None = None, retry: dict | None = None,
             timeout_s: float | None = None, queue: str | None = None) -> StepHandle:
        """A task step (``condition``: a CEL expression; false skips the step)."""
        return self._add(key, {"task": _task_name(task), "parents": _keys(parents),
                               "args": args, "kwargs": kwargs, "trigger_rule": trigger_rule,
                               "condition": condition, "retry": retry, "timeout_s": timeout_s,
                               "queue": queue})

    def branch(self, key: str, task: Any, *, children: list[str], **fields: Any) -> StepHandle:
        """A step whose task returns the children (of ``children``) that run."""
        handle = self.step(key, task, **fields)
        self.steps[-1].update(kind="branch", children=list(children))
        return handle

    def map(self, key: str, task: Any, *, over: str | list, **fields: Any) -> StepHandle:
        """One instance of ``task`` per item of ``over`` (a reference to a list, or a list)."""
        handle = self.step(key, task, **fields)
        self.steps[-1].update(kind="map", map_over=over)
        return handle

    def fan_in(self, key: str, task: Any, **fields: Any) -> StepHandle:
        """A join over map steps, receiving their results in index order."""
        handle = self.step(key, task, **fields)
        self.steps[-1]["kind"] = "fan_in"
        return handle

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v for k, v in self.options.items() if v},
                "steps": self.steps}

    def define(self, *, tenant: Tenant | str, by: str = "") -> WorkflowDefinitionVersion:
        """Store this definition (a new version only when it changed)."""
        return engine.define(_tenant(tenant), self.to_dict(), by=by)

    def start(self, *, tenant: Tenant | str, run_input: Any = None,
              idempotency_key: str | None = None, queue: str | None = None,
              by: str = "") -> WorkflowRun:
        """Start a run of the latest stored version of this workflow."""
        return engine.start_run(self.name, tenant=_tenant(tenant), run_input=run_input,
                                idempotency_key=idempotency_key, queue=queue, by=by)


def _tenant(tenant: Tenant | str) -> Tenant:
    """A tenant object, or one named by its slug."""
    if isinstance(tenant, Tenant):
        return tenant
    found = Tenant.objects.filter(slug=tenant).first()
    if found is None:
        raise engine.WorkflowNotFound(f"no tenant with the slug {tenant!r}")
    return found


def run_status(run_id: Any, *, tenant: Tenant | str) -> dict[str, Any]:
    """A run's status and every step's state, as the REST API shows them."""
    run = WorkflowRun.objects.filter(run_id=run_id, tenant=_tenant(tenant)).select_related(
        "definition").first()
    if run is None:
        raise engine.WorkflowNotFound(f"no workflow run {run_id} for this tenant")
    return {"run_id": str(run.run_id), "name": run.name, "version": run.definition.version,
            "status": run.status, "reason": run.reason, "steps": run_steps(run)}
