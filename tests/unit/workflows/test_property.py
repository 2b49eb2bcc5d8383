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

from hypothesis import HealthCheck, assume, given, settings
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


KINDS = ["task"] * 6 + ["branch", "map"]
CONDITIONS = [None, None, None, True, False, "error"]
OUTCOMES = [SUCCEEDED, FAILED, SKIPPED, SUCCEEDED]
WINDOW = 8  # a step's parents are drawn among the 8 steps before it


def _digits(number: int, base: int, count: int) -> list[int]:
    return [(number // base**i) % base for i in range(count)]


def _bits(mask: int, keys: list[str], most: int) -> list[str]:
    return [k for i, k in enumerate(keys) if mask >> i & 1][:most]


@st.composite
def model_steps(draw: st.DrawFn, max_steps: int = 30) -> list[ModelStep]:
    """Random workflows, a few integer draws per step (each shrinks towards 0: a root task
    with the default rule, no condition, one attempt that succeeds)."""
    count = draw(st.integers(1, max_steps))
    steps: list[ModelStep] = []
    for i in range(count):
        window = [s.key for s in steps[-WINDOW:]]
        parents = _bits(draw(st.integers(0, 2 ** len(window) - 1)), window, 4)
        rules = RULES if parents else ROOT_RULES
        rule, kind, condition, tries = _shape(draw, len(rules))
        steps.append(ModelStep(key=f"s{i}", parents=parents, rule=rules[rule],
                               kind=KINDS[kind], condition=CONDITIONS[condition],
                               max_attempts=tries + 1))
    for step in steps:
        _draw_outcomes(draw, step, steps)
    return steps


def _shape(draw: st.DrawFn, rule_count: int) -> list[int]:
    """(rule, kind, condition, attempts - 1) as indexes, from one draw."""
    shape = draw(st.integers(0, rule_count * len(KINDS) * len(CONDITIONS) * 3 - 1))
    rule, shape = shape % rule_count, shape // rule_count
    kind, shape = shape % len(KINDS), shape // len(KINDS)
    condition, tries = shape % len(CONDITIONS), shape // len(CONDITIONS)
    return [rule, kind, condition, tries]


def _attempts(draw: st.DrawFn, count: int, outcomes: list[str]) -> list[str]:
    number = draw(st.integers(0, len(outcomes) ** count - 1))
    return [outcomes[d] for d in _digits(number, len(outcomes), count)]


def _draw_outcomes(draw: st.DrawFn, step: ModelStep, steps: list[ModelStep]) -> None:
    step.attempts = _attempts(draw, step.max_attempts, OUTCOMES)
    children = [s.key for s in steps if step.key in s.parents]
    if step.kind == "branch" and not children:
        step.kind = "task"
    if step.kind == "branch":
        step.children = children
        _draw_choice(draw, step)
        for child in steps:
            if step.key in child.parents and child.rule == "always":
                child.rule = "all_done"  # refused by validation: 'always' cannot follow a branch
    if step.kind == "map":
        count = draw(st.integers(0, 3))
        step.items = [_attempts(draw, step.max_attempts, [SUCCEEDED, FAILED, SUCCEEDED])
                      for _ in range(count)]


def _draw_choice(draw: st.DrawFn, step: ModelStep) -> None:
    """A list of children, one child as a string, or a result that names no child."""
    mask = draw(st.integers(0, 2 ** (len(step.children) + 2) - 1))
    form, mask = mask & 3, mask >> 2
    chosen = _bits(mask, step.children, len(step.children))
    if form == 3:
        step.choice = "invalid"
    elif form == 2 and chosen:
        step.choice = chosen[0]
    else:
        step.choice = chosen


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


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(steps=model_steps(), seed=st.integers(0, 2**32 - 1))
def test_retry_from_failure_ends_where_the_model_predicts_for_the_new_outcomes(steps, seed):
    definition, run_input = to_definition(steps)
    simulation = Simulation(definition, steps, random.Random(seed))
    state = simulation.start(run_input)
    assume(str(state.status) == FAILED)
    before = final_states(state)
    retried = evaluate(definition, state, RetryFromFailure(), now_ms=simulation.now_ms + 1)
    reset = {t.ref.key for t in retried.transitions
             if t.after is StepStatus.PENDING and t.ref.map_index is None}
    rng = random.Random(seed + 1)
    for step in steps:
        _redraw_after_reset(rng, step, step.key in reset, state.steps[step.key])
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


def _redraw_after_reset(rng: random.Random, step: ModelStep, was_reset: bool,
                        old_state) -> None:
    """Fresh outcomes for what runs again: reset steps, and map items that did not succeed;
    a map item that succeeded keeps its result (it does not run again)."""
    def fresh(outcomes: list[str]) -> list[str]:
        return [rng.choice(outcomes) for _ in range(step.max_attempts)]

    if was_reset:
        step.attempts = fresh([SUCCEEDED, FAILED, SKIPPED])
        step.items = [fresh([SUCCEEDED, FAILED]) for _ in step.items]
    elif step.kind == "map" and old_state.instances:
        step.items = [[SUCCEEDED] if inst.status is StepStatus.SUCCEEDED
                      else fresh([SUCCEEDED, FAILED]) for inst in old_state.instances]
