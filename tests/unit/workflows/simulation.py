"""Drive a run through :func:`workflows.evaluation.evaluate` the way the engine would.

A simulated engine: after each evaluation it looks at the run's state, picks one thing that
could happen next (a worker takes a READY step, a RUNNING step ends, a retry comes due) with
the random source given, and feeds the matching event back. Steps end as a
:class:`~tests.unit.workflows.reference_model.ModelStep` says each attempt ends. Along the way
it checks the invariants the engine relies on: nothing is dispatched twice for one attempt, a
join is decided only once every parent has ended (except the early RUN of one_* and always),
and every step that has not ended has a waiting reason.
"""

from __future__ import annotations

import random
from typing import Any

from tests.unit.workflows.reference_model import FAILED, ModelStep
from workflows.definitions import WorkflowDefinition
from workflows.evaluation import evaluate
from workflows.rules import EARLY_FIRING_RULES
from workflows.runs import (
    Evaluation,
    Event,
    RetryDue,
    RunStarted,
    RunState,
    StepEnded,
    StepRef,
    StepStarted,
    StepState,
    Transition,
)
from workflows.states import StepStatus

MAX_EVENTS = 5_000


def to_definition(steps: list[ModelStep]) -> tuple[WorkflowDefinition, dict[str, Any]]:
    """The workflow the model describes, and the run input its conditions and maps read."""
    run_input: dict[str, Any] = {"flags": {}, "items": {}}
    raw = []
    for step in steps:
        data: dict[str, Any] = {"key": step.key, "task": f"tasks.{step.key}",
                                "parents": step.parents, "trigger_rule": step.rule,
                                "kind": step.kind,
                                "retry": {"max_attempts": step.max_attempts,
                                          "initial_delay_ms": 10}}
        if step.condition is not None:
            data["condition"] = _condition(step, run_input)
        if step.kind == "branch":
            data["children"] = step.children
        if step.kind == "map":
            data["map_over"] = f"input.items.{step.key}"
            data["kwargs"] = {"item": {"$ref": "map.item"}}
            run_input["items"][step.key] = list(range(len(step.items)))
        raw.append(data)
    return WorkflowDefinition.from_dict({"name": "property", "steps": raw}), run_input


def _condition(step: ModelStep, run_input: dict[str, Any]) -> str:
    if step.condition == "error":
        return f"input.absent.{step.key}"
    run_input["flags"][step.key] = step.condition
    return f"input.flags.{step.key}"


class Simulation:
    """One run, driven to its end."""

    def __init__(self, definition: WorkflowDefinition, steps: list[ModelStep],
                 rng: random.Random) -> None:
        self.definition = definition
        self.model = {s.key: s for s in steps}
        self.rng = rng
        self.now_ms = 0
        self.dispatched: set[tuple[str, int]] = set()
        self.state: RunState | None = None

    def start(self, run_input: Any) -> RunState:
        self.state = RunState.new(self.definition, run_input, now_ms=0)
        self.feed(RunStarted())
        return self.run_to_end()

    def feed(self, event: Event) -> Evaluation:
        assert self.state is not None
        self.now_ms += self.rng.randint(0, 50)
        evaluation = evaluate(self.definition, self.state, event, now_ms=self.now_ms,
                              rng=self.rng)
        self.check(evaluation)
        self.state = evaluation.state
        return evaluation

    def run_to_end(self) -> RunState:
        assert self.state is not None
        for _ in range(MAX_EVENTS):
            if self.state.status.is_terminal:
                return self.state
            options = list(self.next_events())
            assert options, f"run stuck: {self.state}"
            self.feed(self.rng.choice(options))
        raise AssertionError("run did not end")

    def next_events(self):
        assert self.state is not None
        for key, step_state in self.state.steps.items():
            if step_state.instances is not None:
                for index, instance in enumerate(step_state.instances):
                    yield from self._events_for(StepRef(key, index), instance)
            else:
                yield from self._events_for(StepRef(key), step_state)

    def _events_for(self, ref: StepRef, step_state: StepState):
        if step_state.status is StepStatus.READY:
            yield StepStarted(ref.key, step_state.attempt, ref.map_index)
        elif step_state.status is StepStatus.RUNNING and step_state.instances is None:
            yield self.ending(ref, step_state)
        elif step_state.status is StepStatus.RETRY_WAIT:
            yield RetryDue(ref.key, step_state.attempt, ref.map_index)

    def ending(self, ref: StepRef, step_state: StepState) -> StepEnded:
        model = self.model[ref.key]
        plan = model.attempts if ref.map_index is None else model.items[ref.map_index]
        number = step_state.attempt - step_state.attempt_offset
        outcome = plan[number - 1] if number <= len(plan) else FAILED
        result: Any = f"result of {ref}"
        if model.kind == "branch":
            result = 42 if model.choice == "invalid" else model.choice
        return StepEnded(ref.key, step_state.attempt, StepStatus(outcome), result=result,
                         error_type="tasks.Boom" if outcome == FAILED else None,
                         map_index=ref.map_index)

    def check(self, evaluation: Evaluation) -> None:
        for dispatch in evaluation.dispatches:
            identity = (str(dispatch.ref), dispatch.attempt)
            assert identity not in self.dispatched, f"{identity} dispatched twice"
            self.dispatched.add(identity)
        new = evaluation.state
        for transition in evaluation.transitions:
            if transition.before is StepStatus.PENDING and transition.ref.map_index is None:
                self._check_decided_on_time(transition, new)
        for key, step_state in new.steps.items():
            if not step_state.status.is_terminal and step_state.status is not \
                    StepStatus.RUNNING:
                assert key in evaluation.waiting, f"`{key}` has no waiting reason"

    def _check_decided_on_time(self, transition: Transition, state: RunState) -> None:
        """Only one_success, one_failed, one_done and always may leave PENDING before every
        parent has ended, and only to run (a condition may then still skip or fail it)."""
        step = self.definition.step(transition.ref.key)
        open_parents = [p for p in step.parents if not state.steps[p].status.is_terminal]
        if not open_parents or transition.after is StepStatus.CANCELLED:
            return
        code = transition.reason.code if transition.reason else None
        assert step.trigger_rule in EARLY_FIRING_RULES and code not in (
            "trigger_rule", "branch_not_taken"), (
            f"`{step.key}` ({step.trigger_rule}) became {transition.after} while "
            f"{open_parents} had not ended")
