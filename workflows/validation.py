"""Whole-workflow checks of a definition: the ones that need every step at once.

Each step checks its own fields when it is built (:class:`~workflows.definitions.StepDefinition`);
this module checks what only the graph can tell: duplicate keys, unknown parents, cycles, joins
over no parents, fan-ins without a map, branch children that are not children, references to
steps that are not ancestors, and the workflow's own fields and limits. Every check adds to one
list of :class:`~workflows.errors.Problem`, so a definition's author sees all of them at once.

The limits live here: at most :data:`MAX_STEPS` steps and :data:`MAX_MAP_ITEMS` items per map,
which keeps one evaluation of a run (a pass over every step) well under a millisecond per
hundred steps, and the fan-out of one map publishable within the benchmark's 2 s.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workflows.errors import Problem
from workflows.graph import ancestors_map, find_cycle, topological_order
from workflows.rules import JOINING_RULES, TriggerRule

if TYPE_CHECKING:
    from workflows.definitions import StepDefinition

MAX_STEPS = 1_000
MAX_MAP_ITEMS = 10_000
MAX_DESCRIPTION_LENGTH = 2_000
KEY_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}\Z")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}\Z")


@dataclass(frozen=True)
class Graph:
    """A valid definition's graph, computed once."""

    by_key: dict[str, StepDefinition]
    order: tuple[str, ...]
    children: dict[str, tuple[str, ...]]
    ancestors: dict[str, frozenset[str]]
    descendants: dict[str, frozenset[str]]


@dataclass
class _Survey:
    """What the checks share: the steps by key, where each is in the payload, and the keys
    the payload names (some may belong to steps that did not parse)."""

    steps: dict[str, StepDefinition]
    paths: dict[str, str]
    known: set[str]
    ancestors: dict[str, frozenset[str]]
    complete: dict[str, bool]  # whether every ancestor was built (else ancestors is partial)
    problems: list[Problem]

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))


def workflow_problems(
    values: Mapping[str, Any],
    steps: Sequence[StepDefinition] | Sequence[tuple[int, StepDefinition]],
    *,
    known_keys: set[str] | None = None,
    raw_steps: object = None,
) -> list[Problem]:
    """Every whole-workflow problem. ``steps`` are the steps that were built, alone or with
    their index in the payload; ``known_keys`` the keys of every step in the payload."""
    indexed = [s if isinstance(s, tuple) else (i, s) for i, s in enumerate(steps)]
    problems = _field_problems(values)
    problems += _count_problems(raw_steps if raw_steps is not None else values.get("steps"),
                                len(indexed))
    survey = _survey(indexed, known_keys, problems)
    for check in (_parent_problems, _cycle_problems, _join_problems, _branch_problems,
                  _reference_problems):
        check(survey)
    _self_start_problems(survey, values.get("name"))
    return survey.problems


def _field_problems(values: Mapping[str, Any]) -> list[Problem]:
    problems = []
    name = values.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        problems.append(Problem("name", f"{name!r} is not a workflow name: 1-200 letters, "
                                        "digits, '_', '.', ':' or '-', starting with a "
                                        "letter or digit"))
    description = values.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_LENGTH:
        problems.append(Problem("description", f"a string of at most "
                                               f"{MAX_DESCRIPTION_LENGTH} characters"))
    timeout = values.get("run_timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout > 0):
        problems.append(Problem("run_timeout_s", f"a positive number of seconds, "
                                                 f"not {timeout!r}"))
    limit = values.get("max_concurrent_runs")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        problems.append(Problem("max_concurrent_runs", f"a whole number of at least 1, "
                                                       f"not {limit!r}"))
    return problems


def _count_problems(raw_steps: object, built: int) -> list[Problem]:
    if not isinstance(raw_steps, list | tuple):
        return [Problem("steps", "a workflow needs a list of steps")]
    if not raw_steps:
        return [Problem("steps", "a workflow needs at least one step")]
    if len(raw_steps) > MAX_STEPS:
        return [Problem("steps", f"a workflow has at most {MAX_STEPS:,} steps, "
                                 f"this one has {len(raw_steps):,}")]
    return []


def _survey(indexed: list[tuple[int, StepDefinition]], known_keys: set[str] | None,
            problems: list[Problem]) -> _Survey:
    first_index: dict[str, int] = {}
    steps: dict[str, StepDefinition] = {}
    duplicated = {s.key for _, s in indexed if sum(t.key == s.key for _, t in indexed) > 1}
    paths: dict[str, str] = {}
    for index, step in indexed:
        if step.key in first_index:
            first = first_index[step.key]
            problems.append(Problem(f"steps[{index}].key",
                                    f"duplicate key '{step.key}' (also steps[{first}])"))
            continue
        first_index[step.key] = index
        steps[step.key] = step
        paths[step.key] = f"steps[{index}]" if step.key in duplicated else f"steps.{step.key}"
    known = set(steps) | (known_keys or set())
    parents = {k: tuple(p for p in s.parents if p in steps) for k, s in steps.items()}
    order, _ = topological_order(parents)
    # A parent the payload names but that did not parse hides the ancestors above it.
    unparsed = known - set(steps)
    complete: dict[str, bool] = {}
    for key in order:
        complete[key] = not unparsed.intersection(steps[key].parents) and all(
            complete[p] for p in parents[key])
    return _Survey(steps, paths, known, ancestors_map(parents, order), complete, problems)


def _unknown_step(key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f"unknown step '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")


def _parent_problems(survey: _Survey) -> None:
    for key, step in survey.steps.items():
        for i, parent in enumerate(step.parents):
            if parent not in survey.known:
                survey.add(f"{survey.paths[key]}.parents[{i}]",
                           _unknown_step(parent, survey.known))


def _cycle_problems(survey: _Survey) -> None:
    parents = {k: tuple(p for p in s.parents if p in survey.steps)
               for k, s in survey.steps.items()}
    cycle = find_cycle(parents)
    if cycle:
        closing = cycle[0]
        survey.add(f"{survey.paths[closing]}.parents", "cycle " + " → ".join(cycle))


def _join_problems(survey: _Survey) -> None:
    for key, step in survey.steps.items():
        path = survey.paths[key]
        if not step.parents and step.kind == "fan_in":
            survey.add(f"{path}.parents", "a fan_in step joins its parents' results, but it "
                                          "has no parents (an empty join is refused)")
        elif not step.parents and step.trigger_rule in JOINING_RULES:
            survey.add(f"{path}.trigger_rule", f"rule '{step.trigger_rule}' joins over the "
                                               "step's parents, but it has none")
        elif step.kind == "fan_in" and _all_built(step.parents, survey) and not any(
                survey.steps[p].kind == "map" for p in step.parents):
            survey.add(f"{path}.parents", "a fan_in step needs a map step among its parents")


def _all_built(keys: Sequence[str], survey: _Survey) -> bool:
    return all(k in survey.steps for k in keys)


def _branch_problems(survey: _Survey) -> None:
    for key, step in survey.steps.items():
        if step.kind == "branch":
            _check_branch(key, step, survey)


def _check_branch(key: str, step: StepDefinition, survey: _Survey) -> None:
    path = survey.paths[key]
    for i, child in enumerate(step.children):
        if child not in survey.known:
            survey.add(f"{path}.children[{i}]", _unknown_step(child, survey.known))
        elif child in survey.steps and key not in survey.steps[child].parents:
            survey.add(f"{path}.children[{i}]", f"'{child}' does not list '{key}' among its "
                                                "parents")
    for other, candidate in survey.steps.items():
        if key not in candidate.parents:
            continue
        if other not in step.children:
            survey.add(f"{path}.children", f"'{other}' lists '{key}' as a parent but is not "
                                           "among its children")
        if candidate.trigger_rule == TriggerRule.ALWAYS:
            survey.add(f"{survey.paths[other]}.trigger_rule", f"rule 'always' does not wait "
                                                              f"for its parents, so it cannot "
                                                              f"follow branch '{key}'")


def _reference_problems(survey: _Survey) -> None:
    for key, step in survey.steps.items():
        path = survey.paths[key]
        for place, ref in step.references():
            if ref.step:
                _check_seen(survey, key, step, ref.step, f"{path}.{place}")
        for named in sorted(step.condition.step_keys if step.condition else ()):
            _check_seen(survey, key, step, named, f"{path}.condition")


def _check_seen(survey: _Survey, key: str, step: StepDefinition, named: str, path: str) -> None:
    """A reference from ``key`` to ``named`` must reach an ancestor that has ended."""
    if named == key:
        survey.add(path, f"step '{key}' cannot refer to itself")
    elif named not in survey.known:
        survey.add(path, _unknown_step(named, survey.known))
    elif named not in survey.ancestors.get(key, ()) and survey.complete.get(key, False):
        survey.add(path, f"'steps.{named}' is not an ancestor of '{key}': a step sees only "
                         "the steps above it")
    elif step.trigger_rule == TriggerRule.ALWAYS:
        survey.add(path, f"rule 'always' does not wait for its parents, so '{key}' cannot "
                         f"refer to 'steps.{named}' (all_done waits for them, whatever their "
                         "outcome)")


def _self_start_problems(survey: _Survey, name: object) -> None:
    for key, step in survey.steps.items():
        if step.kind == "sub_workflow" and step.sub_workflow == name:
            survey.add(f"{survey.paths[key]}.sub_workflow", "a workflow cannot start itself")
