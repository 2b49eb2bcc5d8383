"""Plans over a whole run: what cancelling stops, and what retrying from failure re-runs.

**Cancellation** (a user's cancel, or the run timeout): every step that has not started —
PENDING, READY, RETRY_WAIT, map instances included — is CANCELLED at once, so none of them ever
starts; every RUNNING step is stopped (the engine's soft-then-hard cancellation for a task; for
a sub-workflow, its parent-close policy: terminate or request-cancel the child run, or abandon
it). The run ends CANCELLED (TIMED_OUT for the timeout) when the running steps have ended.

**Retry from failure** (a FAILED or TIMED_OUT run; USERS.md row 18, airflow#52640): each step
that FAILED, was CANCELLED or is UPSTREAM_FAILED goes back to PENDING, and so does *every* step
below one of them, whatever its state (a ``one_failed`` alert that ran, a join that was
skipped): their states are decided again from scratch, as if the run were reaching them for
the first time. Every other step keeps its state and result, and nothing above a failure runs
again. A map step that failed only because some of its instances failed, and whose input did
not change (nothing above it is reset), keeps its expansion: only the instances that did not
succeed run again (airflow#41278: clearing one map index must not clear them all). The retry
budget starts afresh for each reset step (``attempt_offset``); attempt numbers keep growing, so
a late result of an old attempt stays fenced out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workflows.definitions import StepKind, WorkflowDefinition
from workflows.errors import InvalidEvent
from workflows.runs import RunState, StepRef, StepState, StopStep
from workflows.states import RunStatus, StepStatus

_NOT_STARTED = frozenset({StepStatus.PENDING, StepStatus.READY, StepStatus.RETRY_WAIT})
_FAILURES = frozenset({StepStatus.FAILED, StepStatus.UPSTREAM_FAILED, StepStatus.CANCELLED})
RETRYABLE_RUN_STATUSES = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT})


@dataclass(frozen=True)
class CancellationPlan:
    """What stopping a run does: ``cancel`` (never started: CANCELLED now) and ``stop``
    (running: stop them, then wait for their end)."""

    cancel: tuple[StepRef, ...] = ()
    stop: tuple[StopStep, ...] = ()


def plan_cancellation(definition: WorkflowDefinition, state: RunState) -> CancellationPlan:
    """The plan for stopping ``state``'s run now."""
    cancel: list[StepRef] = []
    stop: list[StopStep] = []
    for key in definition.order:
        step_state = state.steps[key]
        if step_state.instances is not None and step_state.status is StepStatus.RUNNING:
            for index, instance in enumerate(step_state.instances):
                _classify(StepRef(key, index), instance, "cancel", cancel, stop)
        else:
            _classify(StepRef(key), step_state, _stop_action(definition, key), cancel, stop)
    return CancellationPlan(tuple(cancel), tuple(stop))


def _classify(ref: StepRef, step_state: StepState, action: str,
              cancel: list[StepRef], stop: list[StopStep]) -> None:
    if step_state.status in _NOT_STARTED:
        cancel.append(ref)
    elif step_state.status is StepStatus.RUNNING:
        stop.append(StopStep(ref, step_state.attempt, action))


def _stop_action(definition: WorkflowDefinition, key: str) -> str:
    step = definition.step(key)
    if step.kind is StepKind.SUB_WORKFLOW and step.parent_close_policy is not None:
        return str(step.parent_close_policy)
    return "cancel"


@dataclass(frozen=True)
class RetryPlan:
    """What retrying a run from its failures does: ``reset`` steps go back to PENDING (their
    states decided again), ``rerun_instances`` lists, per map step that keeps its expansion,
    the instances that run again; ``kept`` steps keep their state and result."""

    reset: tuple[str, ...] = ()
    rerun_instances: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    kept: tuple[str, ...] = ()


def plan_retry_from_failure(definition: WorkflowDefinition, state: RunState) -> RetryPlan:
    """The plan for retrying ``state``'s run from its failures; InvalidEvent unless the run is
    FAILED or TIMED_OUT."""
    if state.status not in RETRYABLE_RUN_STATUSES:
        raise InvalidEvent(f"only a FAILED or TIMED_OUT run can be retried from failure; "
                           f"this one is {state.status}")
    reset: list[str] = []
    rerun: dict[str, tuple[int, ...]] = {}
    kept: list[str] = []
    for key in definition.order:
        step_state = state.steps[key]
        above_changes = any(p in rerun or p in reset for p in definition.step(key).parents)
        if above_changes:
            reset.append(key)
        elif step_state.status in _FAILURES and step_state.instances:
            rerun[key] = tuple(i for i, inst in enumerate(step_state.instances)
                               if inst.status is not StepStatus.SUCCEEDED)
        elif step_state.status in _FAILURES:
            reset.append(key)
        else:
            kept.append(key)
    return RetryPlan(tuple(reset), rerun, tuple(kept))
