"""A scripted engine for the evaluator's unit tests: ``run.succeed("load", result)`` and the
like, each one the events the engine would send (a lease taken, then the attempt's end)."""

from __future__ import annotations

import random
from typing import Any

from workflows.definitions import WorkflowDefinition
from workflows.evaluation import evaluate
from workflows.runs import (
    Evaluation,
    Event,
    Reason,
    RunStarted,
    RunState,
    StepEnded,
    StepRef,
    StepStarted,
    StepState,
)
from workflows.states import StepStatus


def workflow(*steps: dict[str, Any], **fields: Any) -> WorkflowDefinition:
    """A definition from compact step dicts: ``task`` defaults to ``tasks.<key>``."""
    raw = []
    for step in steps:
        step = dict(step)
        if step.get("kind") != "sub_workflow":
            step.setdefault("task", f"tasks.{step['key']}")
        raw.append(step)
    return WorkflowDefinition.from_dict({"name": "test", **fields, "steps": raw})


class Run:
    """One run of ``definition``; every call records the last evaluation in ``last``."""

    def __init__(self, definition: WorkflowDefinition, run_input: Any = None, *,
                 now_ms: int = 0, rng: random.Random | None = None) -> None:
        self.definition = definition
        self.now_ms = now_ms
        self.rng = rng
        self.state = RunState.new(definition, run_input, now_ms=now_ms)
        self.last: Evaluation | None = None
        self.log: list[Evaluation] = []

    def send(self, event: Event, *, now_ms: int | None = None) -> Evaluation:
        if now_ms is not None:
            self.now_ms = now_ms
        self.last = evaluate(self.definition, self.state, event, now_ms=self.now_ms,
                             rng=self.rng)
        self.log.append(self.last)
        self.state = self.last.state
        return self.last

    def start(self) -> Evaluation:
        return self.send(RunStarted())

    def step(self, key: str, index: int | None = None) -> StepState:
        state = self.state.steps[key]
        return state if index is None else (state.instances or ())[index]

    def begin(self, key: str, index: int | None = None) -> Evaluation:
        return self.send(StepStarted(key, self.step(key, index).attempt, index))

    def end(self, key: str, outcome: StepStatus, index: int | None = None,
            **fields: Any) -> Evaluation:
        if self.step(key, index).status is StepStatus.READY:
            self.begin(key, index)
        attempt = self.step(key, index).attempt
        return self.send(StepEnded(key, attempt, outcome, map_index=index, **fields))

    def succeed(self, key: str, result: Any = None, index: int | None = None) -> Evaluation:
        return self.end(key, StepStatus.SUCCEEDED, index, result=result)

    def fail(self, key: str, index: int | None = None,
             error_type: str = "tasks.Boom", error: str = "boom") -> Evaluation:
        return self.end(key, StepStatus.FAILED, index, error_type=error_type, error=error)

    def skip(self, key: str) -> Evaluation:
        return self.end(key, StepStatus.SKIPPED)

    def status(self, key: str, index: int | None = None) -> str:
        return str(self.step(key, index).status)

    def statuses(self) -> dict[str, str]:
        return {key: str(s.status) for key, s in self.state.steps.items()}

    def reason(self, key: str) -> Reason:
        reason = self.step(key).reason
        assert reason is not None, f"`{key}` has no reason"
        return reason

    def dispatched(self) -> list[str]:
        """Every ref dispatched so far, in order."""
        return [str(d.ref) for e in self.log for d in e.dispatches]

    def dispatch_of(self, key: str, index: int | None = None):
        ref = StepRef(key, index)
        found = [d for e in self.log for d in e.dispatches if d.ref == ref]
        assert found, f"`{ref}` was never dispatched"
        return found[-1]
