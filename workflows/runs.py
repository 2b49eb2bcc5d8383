"""A run's state, the events that move it, and what an evaluation decides: plain values.

The engine keeps these in PostgreSQL (a run row, a row per step and per map instance) and hands
them to :func:`workflows.evaluation.evaluate` inside the transaction that records an event; the
evaluation gives back the new state and the decisions (transitions to write with their audit
rows, steps to dispatch, retries to schedule, running steps to stop). Nothing here does I/O or
reads a clock: time arrives as ``now_ms`` (UTC epoch milliseconds, DESIGN.md decision 10).

Attempts: ``StepState.attempt`` is the number of the step's current (or next) attempt. It grows
by one each time the step becomes READY or RETRY_WAIT and never goes down, so it can fence
results (a late result of attempt 2 does not match attempt 3). ``attempt_offset`` is how many
attempts came before the current series: retry from failure starts a new series, so the retry
policy counts ``attempt - attempt_offset``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from workflows.definitions import WorkflowDefinition
from workflows.states import RunStatus, StepStatus


@dataclass(frozen=True)
class Reason:
    """Why a step is where it is, for machines (``code``, ``details``) and people (``text``):
    ``Reason("waiting_for_parents", "waiting for `load` (RUNNING)", {"parents":
    {"load": "RUNNING"}})``."""

    code: str
    text: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "text": self.text, **self.details}


@dataclass(frozen=True)
class StepState:
    """One step (or one map instance) of a run."""

    status: StepStatus = StepStatus.PENDING
    result: Any = None
    attempt: int = 0
    attempt_offset: int = 0
    reason: Reason | None = None
    retry_at_ms: int | None = None
    instances: tuple[StepState, ...] | None = None  # a map step's, once it has expanded

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": str(self.status),
            "result": self.result,
            "attempt": self.attempt,
            "reason": self.reason.to_dict() if self.reason else None,
        }
        if self.retry_at_ms is not None:
            data["retry_at_ms"] = self.retry_at_ms
        if self.instances is not None:
            data["instances"] = [i.to_dict() for i in self.instances]
        return data

    @cached_property
    def open_instances(self) -> int:
        """How many of a map step's instances have not ended (0 for any other step); counted
        once per state, then carried from state to state by :meth:`with_instance`."""
        return sum(1 for i in self.instances or () if not i.status.is_terminal)

    def with_instance(self, index: int, new: StepState) -> StepState:
        """This map step with its instance ``index`` replaced by ``new``. The count of open
        instances is carried over, not counted again: counted on each event, a 10,000-way
        fan-out's instance ends each read every instance (O(n²) over the map; 88 % of the
        evaluator's time at 5,000 ends in, measured with cProfile)."""
        instances = list(self.instances or ())
        old = instances[index]
        instances[index] = new
        changed = replace(self, instances=tuple(instances))
        if "open_instances" in self.__dict__:
            changed.__dict__["open_instances"] = (self.open_instances + old.status.is_terminal
                                                  - new.status.is_terminal)
        return changed


@dataclass(frozen=True)
class RunState:
    """A run: its status, input and deadline, and every step's state by key."""

    status: RunStatus
    run_input: Any
    started_at_ms: int
    steps: Mapping[str, StepState]
    deadline_ms: int | None = None
    reason: Reason | None = None

    @classmethod
    def new(cls, definition: WorkflowDefinition, run_input: Any, *, now_ms: int) -> RunState:
        """A run that has just been created: every step PENDING (evaluate :class:`RunStarted`
        to dispatch its first steps)."""
        timeout = definition.run_timeout_s
        return cls(
            status=RunStatus.RUNNING,
            run_input=run_input,
            started_at_ms=now_ms,
            steps={key: StepState() for key in definition.order},
            deadline_ms=now_ms + int(timeout * 1000) if timeout else None,
        )

    def step(self, key: str) -> StepState:
        return self.steps[key]

    def with_steps(self, steps: Mapping[str, StepState], **changes: Any) -> RunState:
        return replace(self, steps=dict(steps), **changes)


@dataclass(frozen=True)
class StepRef:
    """A step, or one instance of a map step."""

    key: str
    map_index: int | None = None

    def __str__(self) -> str:
        return self.key if self.map_index is None else f"{self.key}[{self.map_index}]"


# -- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStarted:
    """The run was created: dispatch the steps that can start."""


@dataclass(frozen=True)
class StepStarted:
    """A worker took the lease of a READY step (or map instance) for ``attempt``."""

    key: str
    attempt: int
    map_index: int | None = None


@dataclass(frozen=True)
class StepEnded:
    """An attempt ended. ``outcome`` is SUCCEEDED (with ``result``), FAILED (with
    ``error_type`` as ``module.Class`` for the retry policy, and ``error``), CANCELLED, or
    SKIPPED (the task decided there was nothing to do; not for map instances)."""

    key: str
    attempt: int
    outcome: StepStatus
    result: Any = None
    error_type: str | None = None
    error: str | None = None
    map_index: int | None = None


@dataclass(frozen=True)
class RetryDue:
    """A step's retry time came: it becomes READY for ``attempt``."""

    key: str
    attempt: int
    map_index: int | None = None


@dataclass(frozen=True)
class CancelRequested:
    """Someone cancelled the run."""

    requested_by: str = ""


@dataclass(frozen=True)
class DeadlineCheck:
    """The engine's periodic look at the run's deadline (``now_ms`` is the evaluation's)."""


@dataclass(frozen=True)
class RetryFromFailure:
    """Restart a FAILED or TIMED_OUT run from its failures (see :mod:`workflows.planning`)."""


Event = (RunStarted | StepStarted | StepEnded | RetryDue | CancelRequested | DeadlineCheck
         | RetryFromFailure)


# -- decisions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    """One change of a step's (or instance's) status, for the conditional update and its audit
    row."""

    ref: StepRef
    before: StepStatus
    after: StepStatus
    attempt: int
    reason: Reason | None = None


@dataclass(frozen=True)
class Dispatch:
    """Something to enqueue: a task (``task``, ``args``, ``kwargs``) for a READY step or map
    instance, or, for a sub_workflow step, a child run of ``sub_workflow`` whose input is
    ``kwargs``."""

    ref: StepRef
    attempt: int
    task: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str | None = None
    timeout_s: float | None = None
    sub_workflow: str | None = None


@dataclass(frozen=True)
class RetryScheduled:
    """A failed attempt gets another: send :class:`RetryDue` for ``attempt`` at
    ``retry_at_ms``."""

    ref: StepRef
    attempt: int
    retry_at_ms: int


@dataclass(frozen=True)
class StopStep:
    """A running step to stop because the run is stopping. ``action``: ``cancel`` a task
    (soft, then hard after the grace period), or for a sub-workflow its parent-close policy:
    ``terminate`` or ``request_cancel`` its run (``abandon`` leaves it running, and the step is
    CANCELLED at once)."""

    ref: StepRef
    attempt: int
    action: str


@dataclass(frozen=True)
class BranchChoice:
    """What a branch step chose: the children that run, and those not taken."""

    key: str
    chosen: tuple[str, ...]
    not_taken: tuple[str, ...]


@dataclass(frozen=True)
class Evaluation:
    """The outcome of one evaluation: the new state and everything the engine must do."""

    state: RunState
    transitions: tuple[Transition, ...] = ()
    dispatches: tuple[Dispatch, ...] = ()
    retries: tuple[RetryScheduled, ...] = ()
    stops: tuple[StopStep, ...] = ()
    branch_choices: tuple[BranchChoice, ...] = ()
    definition: WorkflowDefinition | None = field(default=None, repr=False, compare=False)

    @cached_property
    def waiting(self) -> Mapping[str, Reason]:
        """Why each step that has not ended is waiting (computed when first read: the engine
        reads it when it shows a run, not on every event)."""
        from workflows.evaluation import waiting_reasons  # evaluation builds Evaluations

        if self.definition is None:
            return {}
        return waiting_reasons(self.definition, self.state)

    @property
    def run_status(self) -> RunStatus:
        return self.state.status

    @property
    def run_finished(self) -> bool:
        return self.state.status.is_terminal


class EvaluationChain:
    """The evaluations of one run's events, one after the other, kept as one: every decision in
    order, and the last state.

    A list of the :class:`Evaluation` objects kept every intermediate state with them: the ~4,000
    ends one pass applied to a 10,000-way fan-out each held a state with a tuple of 10,000
    instances, hundreds of MB alive at once, and the garbage collector's passes over them took
    most of the engine's time (cProfile of the engine under ``chrono bench workflow --fanout
    10000``: 5.6 of 18.5 s in the one line that allocated a generator)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.length = 0
        self._transitions: list[Transition] = []
        self._dispatches: list[Dispatch] = []
        self._retries: list[RetryScheduled] = []
        self._stops: list[StopStep] = []
        self._choices: list[BranchChoice] = []
        self._definition: WorkflowDefinition | None = None

    def add(self, evaluation: Evaluation) -> None:
        """``evaluation``, of an event applied to :attr:`state`, next in the chain."""
        self.state = evaluation.state
        self.length += 1
        self._transitions += evaluation.transitions
        self._dispatches += evaluation.dispatches
        self._retries += evaluation.retries
        self._stops += evaluation.stops
        self._choices += evaluation.branch_choices
        self._definition = evaluation.definition

    def evaluations(self) -> list[Evaluation]:
        """The chain as one evaluation (none when nothing was added)."""
        if not self.length:
            return []
        return [Evaluation(state=self.state, transitions=tuple(self._transitions),
                           dispatches=tuple(self._dispatches), retries=tuple(self._retries),
                           stops=tuple(self._stops), branch_choices=tuple(self._choices),
                           definition=self._definition)]


def admission(definition: WorkflowDefinition, active_runs: int) -> Reason | None:
    """Why a new run of ``definition`` must wait, or None when it may start now:
    ``active_runs`` is how many of its runs are RUNNING, CANCELLING or TIMING_OUT."""
    limit = definition.max_concurrent_runs
    if limit is None or active_runs < limit:
        return None
    return Reason("concurrency_limit", f"concurrency limit {limit} reached",
                  {"limit": limit, "active_runs": active_runs})
