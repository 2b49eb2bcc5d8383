"""Property: random workflows end exactly where the reference model says they must.

Random DAGs of up to 30 steps (tasks, branches and maps), random trigger rules, conditions that
are true, false or fail to evaluate, and random outcomes for every attempt of every step that
runs (with retries), are simulated to their end through the evaluator, with steps starting and
ending in a random order (so early-firing rules and joins meet every interleaving). The final
state of every step, and of the run, must be what :mod:`reference_model` computes from the
rules' text alone. A second property retries failed runs from failure with fresh outcomes and
compares them with the model too.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.workflows.reference_model import (
    FAILED,
    SKIPPED,
    SUCCEEDED,
    ModelStep,
    predict,
)
from tests.unit.workflows.simulation import Simulation, to_definition
from workflows.evaluation import evaluate
from workflows.rules import TriggerRule
from workflows.runs import RetryFromFailure
from workflows.states import StepStatus

RULES = [r.value for r in TriggerRule]
ROOT_RULES = ["all_success", "always"]
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def model_steps(draw: st.DrawFn, max_steps: int = 30) -> list[ModelStep]:
    count = draw(st.integers(1, max_steps))
    steps: list[ModelStep] = []
    for i in range(count):
        keys = [s.key for s in steps]
        parents = draw(st.lists(st.sampled_from(keys), unique=True, max_size=4)) if keys else []
        steps.append(ModelStep(
            key=f"s{i}",
            parents=parents,
            rule=draw(st.sampled_from(RULES if parents else ROOT_RULES)),
            kind=draw(st.sampled_from(["task"] * 6 + ["branch", "map"])),
            condition=draw(st.sampled_from([None, None, None, True, False, "error"])),
            max_attempts=draw(st.integers(1, 3)),
        ))
    for step in steps:
        _draw_outcomes(draw, step, steps)
    return steps


def _draw_outcomes(draw: st.DrawFn, step: ModelStep, steps: list[ModelStep]) -> None:
    outcomes = st.sampled_from([SUCCEEDED, SUCCEEDED, FAILED, SKIPPED])
    step.attempts = draw(st.lists(outcomes, min_size=step.max_attempts,
                                  max_size=step.max_attempts))
    children = [s.key for s in steps if step.key in s.parents]
    if step.kind == "branch" and not children:
        step.kind = "task"
    if step.kind == "branch":
        step.children = children
        step.choice = draw(st.one_of(st.lists(st.sampled_from(children), unique=True),
                                     st.sampled_from(children), st.just("invalid")))
        for child in steps:
            if step.key in child.parents and child.rule == "always":
                child.rule = "all_done"  # refused by validation: 'always' cannot follow a branch
    if step.kind == "map":
        attempts = st.lists(st.sampled_from([SUCCEEDED, SUCCEEDED, FAILED]),
                            min_size=step.max_attempts, max_size=step.max_attempts)
        step.items = draw(st.lists(attempts, max_size=3))


def final_states(state) -> dict[str, str]:
    return {key: str(s.status) for key, s in state.steps.items()}


@SETTINGS
@given(steps=model_steps(), seed=st.integers(0, 2**32 - 1))
def test_random_workflows_end_in_the_states_the_reference_model_predicts(steps, seed):
    definition, run_input = to_definition(steps)
    state = Simulation(definition, steps, random.Random(seed)).start(run_input)
    expected_steps, expected_run = predict(steps)
    assert final_states(state) == expected_steps
    assert str(state.status) == expected_run


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=model_steps(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_retry_from_failure_ends_where_the_model_predicts_for_the_new_outcomes(
        steps, seed, data):
    definition, run_input = to_definition(steps)
    simulation = Simulation(definition, steps, random.Random(seed))
    state = simulation.start(run_input)
    if str(state.status) != FAILED:
        return
    before = final_states(state)
    retried = evaluate(definition, state, RetryFromFailure(), now_ms=simulation.now_ms + 1)
    reset = {t.ref.key for t in retried.transitions
             if t.after is StepStatus.PENDING and t.ref.map_index is None}
    for step in steps:
        _redraw_after_reset(data, step, step.key in reset, state.steps[step.key])
    simulation.model = {s.key: s for s in steps}
    simulation.state = retried.state
    end = simulation.run_to_end()
    expected_steps, expected_run = predict(steps)
    assert final_states(end) == expected_steps
    assert str(end.status) == expected_run
    for key, status in before.items():
        if key not in reset and status in (SUCCEEDED, SKIPPED) and \
                definition.step(key).kind != "map":
            assert final_states(end)[key] == status, f"kept step `{key}` changed"


def _redraw_after_reset(data: st.DataObject, step: ModelStep, was_reset: bool,
                        old_state) -> None:
    """Fresh outcomes for what runs again: reset steps, and map items that did not succeed."""
    fresh = st.lists(st.sampled_from([SUCCEEDED, FAILED, SKIPPED]),
                     min_size=step.max_attempts, max_size=step.max_attempts)
    if was_reset:
        step.attempts = data.draw(fresh)
        step.items = [data.draw(st.lists(st.sampled_from([SUCCEEDED, FAILED]),
                                         min_size=step.max_attempts,
                                         max_size=step.max_attempts)) for _ in step.items]
        return
    if step.kind == "map" and old_state.instances:
        step.items = [
            [SUCCEEDED] if inst.status is StepStatus.SUCCEEDED else data.draw(
                st.lists(st.sampled_from([SUCCEEDED, FAILED]), min_size=step.max_attempts,
                         max_size=step.max_attempts))
            for inst in old_state.instances]
