"""Sub-workflow steps, the pure part: how a child run is named after its parent's step, when
starting it would make a cycle, and what its end means for the parent's step.

A ``sub_workflow`` step's attempt starts one child run of the named workflow. The child is
tied to the attempt three ways, all derived from (parent run, step ref, attempt) so that a
re-applied dispatch finds what the first one made: its ``idempotency_key``
(:func:`child_idempotency_key`), its ``parent_step`` label (``key#attempt``, or
``key[index]#attempt`` for a map instance: :func:`parent_step_label`), and the parent step's
``task_job_id``, under which the child's end comes back to the parent as an ordinary
execution end (see :mod:`workflows.engine`).

When the child ends, the parent step ends (:func:`child_outcome`): SUCCEEDED with
``{"run_id": ..., "status": "SUCCEEDED", "results": {leaf: result}}``, the results of the
child's leaves (the steps no other step depends on) that succeeded; FAILED when the child ended
FAILED or TIMED_OUT, with the child's reason as the error; CANCELLED when it was cancelled.

No I/O here: the engine reads the chain of parent runs and hands it in.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workflows.definitions import WorkflowDefinition
from workflows.runs import RunState, StepRef
from workflows.states import RunStatus, StepStatus

# The error types a sub_workflow step's failure is recorded with (``StepEnded.error_type``):
# the retry policy and the audit rows name errors by ``module.Class``.
CHILD_FAILED = "workflows.errors.SubWorkflowFailed"
CHILD_NOT_FOUND = "workflows.errors.SubWorkflowNotFound"
CHILD_CYCLE = "workflows.errors.SubWorkflowCycle"
_LABEL = re.compile(r"^(?P<key>[A-Za-z0-9_-]+)(?:\[(?P<index>\d+)\])?#(?P<attempt>\d+)$")


def child_idempotency_key(parent_run_id: uuid.UUID | str, ref: StepRef, attempt: int) -> str:
    """The idempotency key of the child run that ``attempt`` of ``ref`` starts: starting it
    twice starts one run."""
    return f"sub-workflow:{parent_run_id}:{parent_step_label(ref, attempt)}"


def parent_step_label(ref: StepRef, attempt: int) -> str:
    """What a child run's ``parent_step`` says: ``load#2``, ``load[7]#2``."""
    return f"{ref}#{attempt}"


def parse_parent_step(label: str) -> tuple[StepRef, int]:
    """The step ref and attempt a ``parent_step`` label names; ValueError when it names none."""
    match = _LABEL.match(label)
    if match is None:
        raise ValueError(f"{label!r} is not a parent step label (key#attempt)")
    index = match.group("index")
    return StepRef(match.group("key"), None if index is None else int(index)), \
        int(match.group("attempt"))


def cycle_of(chain: Sequence[str], name: str) -> tuple[str, ...] | None:
    """The cycle that starting workflow ``name`` below ``chain`` would close, root first and
    ``name`` last (``("a", "b", "a")``), or None. ``chain`` is the starting run's workflow
    name, then its parent run's, and so on up to the root."""
    if name not in chain:
        return None
    path = tuple(reversed(chain))
    return path[path.index(name):] + (name,)


@dataclass(frozen=True)
class ChildOutcome:
    """What a child run's end does to its parent's step: an execution end's ``status``
    (SUCCEEDED, FAILED or CANCELLED), with a ``result`` or an ``error``: two lines, the error
    type (``module.Class``) then what happened, read as a traceback's tail is (the engine takes
    the type from the last line naming one, the summary from the last line)."""

    status: str
    result: Any = None
    error: str = ""


def child_outcome(definition: WorkflowDefinition, state: RunState, *, run_id: uuid.UUID | str,
                  status: RunStatus | str, reason_text: str = "") -> ChildOutcome:
    """The outcome for the parent's step of a child run that ended ``status``."""
    status = RunStatus(str(status))
    if status is RunStatus.SUCCEEDED:
        return ChildOutcome("SUCCEEDED", {"run_id": str(run_id), "status": str(status),
                                          "results": leaf_results(definition, state)})
    if status is RunStatus.CANCELLED:
        return ChildOutcome("CANCELLED")
    why = f": {reason_text}" if reason_text else ""
    return ChildOutcome("FAILED", error=f"{CHILD_FAILED}\nthe sub-workflow run {run_id} of "
                                        f"{definition.name} ended {status}{why}")


def leaf_results(definition: WorkflowDefinition, state: RunState) -> dict[str, Any]:
    """The results of the run's leaves (steps no other step depends on) that succeeded, by
    key, in the definition's order."""
    leaves = set(definition.leaves)
    return {key: state.steps[key].result for key in definition.order
            if key in leaves and state.steps[key].status is StepStatus.SUCCEEDED}
