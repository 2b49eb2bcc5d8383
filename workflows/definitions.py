"""Workflow definitions: a named DAG of steps, parsed from JSON, validated when defined.

What the REST API accepts (and what :meth:`WorkflowDefinition.to_dict` gives back)::

    {"name": "nightly-etl", "description": "", "run_timeout_s": 3600, "max_concurrent_runs": 5,
     "steps": [
       {"key": "extract", "task": "etl.extract", "kwargs": {"day": {"$ref": "input.day"}},
        "retry": {"max_attempts": 3}, "timeout_s": 600, "queue": "etl"},
       {"key": "route", "kind": "branch", "task": "etl.route", "parents": ["extract"],
        "children": ["load", "report"]},
       {"key": "load", "kind": "map", "task": "etl.load_one", "parents": ["route"],
        "map_over": "steps.extract.result.rows", "kwargs": {"row": {"$ref": "map.item"}}},
       {"key": "total", "kind": "fan_in", "task": "etl.total", "parents": ["load"]},
       {"key": "report", "task": "etl.report", "parents": ["route"],
        "condition": "input.send_report && steps.extract.result.count > 0"},
       {"key": "notify", "task": "etl.notify", "parents": ["total", "report"],
        "trigger_rule": "none_failed_min_one_success"},
       {"key": "billing", "kind": "sub_workflow", "sub_workflow": "monthly-billing",
        "parent_close_policy": "request_cancel", "parents": ["notify"]}]}

Step fields: ``key`` (letters, digits, ``_`` and ``-``; unique), ``kind`` (``task``, the
default; ``branch``; ``map``; ``fan_in``; ``sub_workflow``), ``task`` (the Celery task name;
every kind but ``sub_workflow``), ``args`` / ``kwargs`` (JSON, with the references of
:mod:`workflows.arguments`: ``{"$ref": "input.x"}``, ``{"$ref": "steps.<key>.result.x"}``,
``{"$ref": "map.item"}``, ``{"$ref": ..., "default": ...}``, ``{"$literal": ...}``),
``parents``, ``trigger_rule`` (:mod:`workflows.rules`), ``condition`` (CEL,
:mod:`workflows.conditions`), ``retry`` (the fields of :class:`scheduler.retry.RetryPolicy`),
``timeout_s``, ``queue``, and per kind:

- ``branch``: ``children``, the steps it chooses between; exactly the steps that list it as a
  parent. Its task's result names the children that run: a key, a list of keys, or null/[] for
  none (see :mod:`workflows.evaluation` for what happens to the others).
- ``map``: ``map_over``, a reference to a list (``"input.items"``,
  ``"steps.<ancestor>.result.rows"``) or a literal list; one instance per item, each with
  ``{"$ref": "map.item"}`` and ``{"$ref": "map.index"}``; at most 10,000 items.
- ``fan_in``: a join over map steps (one parent at least is a map); with no args or kwargs
  of its own it receives one positional argument per parent, in parent order: that parent's
  result, which for a map is the list of its instances' results in index order.
- ``sub_workflow``: ``sub_workflow`` (the workflow's name; its run input is the step's
  resolved kwargs) and ``parent_close_policy``: ``terminate`` (the default),
  ``request_cancel`` or ``abandon`` — what happens to the child run when this run stops first.

Validation collects every problem and raises one :class:`~workflows.errors.DefinitionError`.
A problem's path names the field the way the payload spells it: ``steps.<key>.<field>`` once a
step has a usable, unique key, ``steps[<index>].<field>`` before that; list items by index
(``steps.load.parents[0]``). Checked: unknown fields (with the closest known name), types,
keys, duplicate keys, unknown parents, cycles (named: ``a → b → a``), a join over no parents
(a ``fan_in``, or a step whose trigger rule joins, with no parents: USERS.md row 20), a fan-in
with no map parent, references to steps that are not ancestors, ``map.*`` outside a map step,
expressions that do not compile, unknown trigger rules, a map over something that is not a list
reference or over a literal list above the limit, branch children that are not its children,
and at most 1,000 steps. Sub-workflow cycles across workflows need the registry and are the
engine's to check; a workflow naming itself is refused here.

Versions: :meth:`WorkflowDefinition.to_dict` writes every field, defaults included, in a fixed
order, so two definitions that mean the same thing give the same dict, and
:meth:`WorkflowDefinition.fingerprint` (SHA-256 of its canonical JSON) tells whether an edit
changed anything. A run is pinned to the version it started with; storing versions is the
engine's.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, KeysView, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from scheduler.retry import RetryPolicy
from workflows import validation
from workflows.arguments import (
    Reference,
    TemplateError,
    compile_template,
    iter_references,
    parse_reference,
    resolve_arguments,
)
from workflows.conditions import Condition
from workflows.errors import DefinitionError, Problem
from workflows.graph import (
    ancestors_map,
    children_map,
    descendants_map,
    topological_order,
)
from workflows.rules import DEFAULT_TRIGGER_RULE, TriggerRule, parse_trigger_rule
from workflows.validation import KEY_PATTERN, MAX_MAP_ITEMS, MAX_STEPS, NAME_PATTERN

__all__ = [
    "MAX_MAP_ITEMS",
    "MAX_STEPS",
    "ParentClosePolicy",
    "StepDefinition",
    "StepKind",
    "WorkflowDefinition",
    "resolve_arguments",
]

MAX_NAME_LENGTH = 200


class StepKind(StrEnum):
    """What a step does when it runs."""

    TASK = "task"
    BRANCH = "branch"
    MAP = "map"
    FAN_IN = "fan_in"
    SUB_WORKFLOW = "sub_workflow"


class ParentClosePolicy(StrEnum):
    """What happens to a sub-workflow's run when its parent run stops first (Temporal's)."""

    TERMINATE = "terminate"
    REQUEST_CANCEL = "request_cancel"
    ABANDON = "abandon"


def _choice(enum: type[StrEnum], value: object, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(m.value for m in enum)
        raise ValueError(f"unknown {what} {value!r} (expected one of {known})") from None


@dataclass(frozen=True)
class StepDefinition:
    """One step of a workflow. Built from JSON by :meth:`WorkflowDefinition.from_dict`, or
    directly (strings and dicts are accepted where an enum, condition or policy is meant);
    raises DefinitionError naming every bad field either way."""

    key: str
    task: str | None = None
    kind: StepKind = StepKind.TASK
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    trigger_rule: TriggerRule = DEFAULT_TRIGGER_RULE
    condition: Condition | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_s: float | None = None
    queue: str | None = None
    children: tuple[str, ...] = ()
    map_over: str | tuple[Any, ...] | None = None
    sub_workflow: str | None = None
    parent_close_policy: ParentClosePolicy | None = None
    args_template: list[Any] = field(init=False, repr=False, compare=False)
    kwargs_template: dict[str, Any] = field(init=False, repr=False, compare=False)
    map_over_template: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems: list[Problem] = []
        for name, check in _STEP_CHECKS:
            try:
                value = check(self, getattr(self, name))
            except TemplateError as e:
                problems.append(Problem(e.path, e.message))
            except ValueError as e:
                problems.append(Problem(name, str(e)))
            else:
                object.__setattr__(self, name, value)
        self._compile_templates(problems)
        if problems:
            raise _InvalidStep(self.key, problems)

    def _compile_templates(self, problems: list[Problem]) -> None:
        args = _template(self.args, "args", tuple, problems) or []
        kwargs = _template(self.kwargs, "kwargs", dict, problems) or {}
        if self.kind == StepKind.FAN_IN and not args and not kwargs:
            args = [parse_reference(f"steps.{p}.result") for p in self.parents
                    if isinstance(p, str) and KEY_PATTERN.match(p)]
        object.__setattr__(self, "args_template", args)
        object.__setattr__(self, "kwargs_template", kwargs)
        over = self.map_over
        template = over if isinstance(over, tuple) else None
        if isinstance(over, str):
            try:
                template = parse_reference(over)
            except ValueError:
                template = None  # _check_map_over reported it
        object.__setattr__(self, "map_over_template", template)
        if self.kind != StepKind.MAP:
            for place, ref in self.references():
                if ref.root == "map":
                    problems.append(Problem(place, f"'{ref.text}' is only defined in a map step"))

    def references(self) -> list[tuple[str, Reference]]:
        """Every reference the step makes, with its place: args, kwargs and map_over."""
        refs = list(iter_references(self.args_template, "args"))
        refs += iter_references(self.kwargs_template, "kwargs")
        if isinstance(self.map_over_template, Reference):
            refs.append(("map_over", self.map_over_template))
        return refs

    @property
    def referenced_steps(self) -> set[str]:
        """The steps named by the step's references and its condition."""
        named = {ref.step for _, ref in self.references() if ref.step}
        return named | set(self.condition.step_keys if self.condition else ())

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=str))

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON, every field written (defaults too) in a fixed order."""
        data: dict[str, Any] = {
            "key": self.key,
            "kind": str(self.kind),
            "task": self.task,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "parents": list(self.parents),
            "trigger_rule": str(self.trigger_rule),
            "condition": self.condition.source if self.condition else None,
            "retry": self.retry.to_json(),
            "timeout_s": self.timeout_s,
            "queue": self.queue,
        }
        data.update(_kind_fields(self))
        return data


def _kind_fields(step: StepDefinition) -> dict[str, Any]:
    if step.kind is StepKind.BRANCH:
        return {"children": list(step.children)}
    if step.kind is StepKind.MAP:
        over = step.map_over
        return {"map_over": over if isinstance(over, str) else list(over or ())}
    if step.kind is StepKind.SUB_WORKFLOW:
        return {"sub_workflow": step.sub_workflow,
                "parent_close_policy": str(step.parent_close_policy)}
    return {}


def _template(value: Any, path: str, kind: type, problems: list[Problem]) -> Any:
    """``value`` compiled, or None when it is not of ``kind`` (its check reported that) or
    holds a malformed reference (reported here)."""
    if not isinstance(value, kind):
        return None
    try:
        return compile_template(list(value) if kind is tuple else value, path)
    except TemplateError as e:
        problems.append(Problem(e.path, e.message))
        return None


class _InvalidStep(DefinitionError):
    """A step's own problems, with paths relative to the step (``trigger_rule``)."""

    def __init__(self, key: object, relative: list[Problem]) -> None:
        self.relative = relative
        prefix = f"steps.{key}" if isinstance(key, str) and KEY_PATTERN.match(key) else "steps[?]"
        super().__init__(Problem(_join(prefix, p.path), p.message) for p in relative)


def _join(prefix: str, path: str) -> str:
    if not path:
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


# -- field checks: each returns the normalised value or raises ValueError ---------------------


def _check_key(step: StepDefinition, value: object) -> str:
    if not isinstance(value, str) or not KEY_PATTERN.match(value):
        raise ValueError(f"{value!r} is not a step key: 1-100 letters, digits, '_' or '-'")
    return value


def _check_kind(step: StepDefinition, value: object) -> StepKind:
    return _choice(StepKind, value, "kind")


def _check_task(step: StepDefinition, value: object) -> str | None:
    kind = _kind_of(step)
    if kind is StepKind.SUB_WORKFLOW:
        if value is not None:
            raise ValueError("a sub_workflow step names a workflow in 'sub_workflow', not a task")
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"a {kind or 'task'} step needs a task name (a non-empty string)")
    return value


def _kind_of(step: StepDefinition) -> StepKind | None:
    """The step's kind, or None when it is not a kind (reported once, by _check_kind)."""
    try:
        return StepKind(step.kind)
    except ValueError:
        return None


def _only_for(step: StepDefinition, kind: StepKind, value: object, message: str) -> bool:
    """Whether the kind-specific field applies; ValueError when it is set on another kind."""
    actual = _kind_of(step)
    if actual is kind:
        return True
    if actual is not None and value not in (None, (), []):
        raise ValueError(message)
    return False


def _check_args(step: StepDefinition, value: object) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"args must be a list, not {_json_type(value)}")
    if value and _kind_of(step) is StepKind.SUB_WORKFLOW:
        raise ValueError("a sub_workflow step's run input is its kwargs: it takes no args")
    return tuple(value)


def _check_kwargs(step: StepDefinition, value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"kwargs must be an object, not {_json_type(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ValueError(f"kwargs keys must be strings, not {bad[0]!r}")
    return dict(value)


def _check_key_list(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{what} must be a list of step keys, not {_json_type(value)}")
    keys: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not KEY_PATTERN.match(item):
            raise TemplateError(f"{what}[{i}]", f"{item!r} is not a step key")
        if item in keys:
            raise TemplateError(f"{what}[{i}]", f"'{item}' is listed twice")
        keys.append(item)
    return tuple(keys)


def _check_parents(step: StepDefinition, value: object) -> tuple[str, ...]:
    parents = _check_key_list(value, "parents")
    if step.key in parents:
        i = parents.index(step.key)
        raise TemplateError(f"parents[{i}]", "a step cannot be its own parent")
    return parents


def _check_trigger_rule(step: StepDefinition, value: object) -> TriggerRule:
    return parse_trigger_rule(value)


def _check_condition(step: StepDefinition, value: object) -> Condition | None:
    if value is None or isinstance(value, Condition):
        return value
    return Condition.compile(value)


_RETRY_FIELDS = tuple(f.name for f in fields(RetryPolicy))


def _check_retry(step: StepDefinition, value: object) -> RetryPolicy:
    if value is None:
        return RetryPolicy()
    if isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"retry must be an object, not {_json_type(value)}")
    for name in value:
        if name not in _RETRY_FIELDS:
            raise TemplateError(f"retry.{name}", _unknown_field(name, _RETRY_FIELDS))
    # The bounds every job's policy is held to (RetryPolicy.problems), the first one broken.
    defaults = RetryPolicy()
    policy = {name: value.get(name, getattr(defaults, name)) for name in RetryPolicy.FIELDS}
    for name, problem in RetryPolicy.problems(policy, given=value.keys()).items():
        raise TemplateError(f"retry.{name}", problem)
    try:
        return RetryPolicy(**value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"invalid retry policy: {e}") from None


def _check_timeout(step: StepDefinition, value: object) -> float | None:
    return _positive_number(value, "timeout_s")


def _check_queue(step: StepDefinition, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValueError("queue must be a non-empty string")
    return value


def _check_children(step: StepDefinition, value: object) -> tuple[str, ...]:
    if not _only_for(step, StepKind.BRANCH, value, "only a branch step declares children"):
        return ()
    children = _check_key_list(value, "children")
    if not children:
        raise ValueError("a branch step declares the children it chooses between")
    return children


def _check_map_over(step: StepDefinition, value: object) -> str | tuple[Any, ...] | None:
    if not _only_for(step, StepKind.MAP, value, "only a map step has map_over"):
        return None
    if isinstance(value, list | tuple):
        if len(value) > MAX_MAP_ITEMS:
            raise ValueError(f"a map fans out to at most {MAX_MAP_ITEMS:,} items, "
                             f"this list has {len(value):,}")
        return tuple(value)
    return _list_reference(value)


def _list_reference(value: object) -> str:
    hint = "a reference to a list such as 'input.items' or 'steps.<key>.result.rows', or a list"
    if isinstance(value, Mapping) and set(value) == {"$ref"}:
        value = value["$ref"]
    if not isinstance(value, str):
        raise ValueError(f"map_over must be {hint}, not {_json_type(value)}")
    try:
        ref = parse_reference(value)
    except ValueError as e:
        raise ValueError(f"{e}; map_over must be {hint}") from None
    if ref.root == "map" or ref.field == "status":
        raise ValueError(f"{value!r} is not a list reference; map_over must be {hint}")
    return value


def _check_sub_workflow(step: StepDefinition, value: object) -> str | None:
    if not _only_for(step, StepKind.SUB_WORKFLOW, value,
                     "only a sub_workflow step names a sub_workflow"):
        return None
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ValueError("a sub_workflow step names the workflow it starts")
    return value


def _check_close_policy(step: StepDefinition, value: object) -> ParentClosePolicy | None:
    if not _only_for(step, StepKind.SUB_WORKFLOW, value,
                     "only a sub_workflow step has a parent_close_policy"):
        return None
    if value is None:
        return ParentClosePolicy.TERMINATE
    return _choice(ParentClosePolicy, value, "parent_close_policy")


_STEP_CHECKS = (
    ("key", _check_key),
    ("kind", _check_kind),
    ("task", _check_task),
    ("args", _check_args),
    ("kwargs", _check_kwargs),
    ("parents", _check_parents),
    ("trigger_rule", _check_trigger_rule),
    ("condition", _check_condition),
    ("retry", _check_retry),
    ("timeout_s", _check_timeout),
    ("queue", _check_queue),
    ("children", _check_children),
    ("map_over", _check_map_over),
    ("sub_workflow", _check_sub_workflow),
    ("parent_close_policy", _check_close_policy),
)
STEP_FIELDS = tuple(name for name, _ in _STEP_CHECKS)


def _positive_number(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return value


def _json_type(value: object) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
            str: "a string", list: "a list", tuple: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def _unknown_field(name: object, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(known), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"expected one of {', '.join(known)}"
    return f"unknown field ({hint})"


@dataclass(frozen=True)
class WorkflowDefinition:
    """A named DAG of steps with its run limits. Build it with :meth:`from_dict` (the API's
    JSON) or directly; both validate and raise DefinitionError listing every problem."""

    name: str
    steps: tuple[StepDefinition, ...]
    run_timeout_s: float | None = None
    max_concurrent_runs: int | None = None
    description: str = ""
    _graph: validation.Graph = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        strays = [Problem(f"steps[{i}]", "expected a StepDefinition")
                  for i, s in enumerate(self.steps) if not isinstance(s, StepDefinition)]
        if strays:
            raise DefinitionError(strays)
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        problems = validation.workflow_problems(values, self.steps)
        if problems:
            raise DefinitionError(problems)
        object.__setattr__(self, "_graph", _analyse(self.steps))

    @classmethod
    def from_dict(cls, data: object) -> WorkflowDefinition:
        """Parse and validate the API's JSON; DefinitionError lists every problem found."""
        if not isinstance(data, Mapping):
            raise DefinitionError([Problem("", "a workflow definition is a JSON object")])
        problems = [Problem(str(k), _unknown_field(k, WORKFLOW_FIELDS))
                    for k in data if k not in WORKFLOW_FIELDS]
        raw_steps = data.get("steps")
        steps, step_problems, known = _parse_steps(raw_steps)
        problems += step_problems
        values = {k: data[k] for k in WORKFLOW_FIELDS if k in data and k != "steps"}
        values = {k: v for k, v in values.items() if v is not None}
        problems += validation.workflow_problems(
            values, steps, known_keys=known, raw_steps=raw_steps)
        if problems:
            raise DefinitionError(problems)
        return cls(**values, steps=tuple(step for _, step in steps))

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON, stable: equal for definitions that mean the same."""
        return {
            "name": self.name,
            "description": self.description,
            "run_timeout_s": self.run_timeout_s,
            "max_concurrent_runs": self.max_concurrent_runs,
            "steps": [step.to_dict() for step in self.steps],
        }

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON: equal exactly when :meth:`to_dict` is equal."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()

    # -- the graph ------------------------------------------------------------------------

    def step(self, key: str) -> StepDefinition:
        """The step called ``key``; KeyError when there is none."""
        return self._graph.by_key[key]

    @property
    def keys(self) -> KeysView[str]:
        """The step keys, in definition order (set-like: compares with a dict's keys)."""
        return self._graph.by_key.keys()

    @property
    def order(self) -> tuple[str, ...]:
        """Every step, each after its parents (steps defined first come first)."""
        return self._graph.order

    @property
    def leaves(self) -> tuple[str, ...]:
        """The steps no other step depends on (they decide the run's outcome)."""
        return tuple(k for k in self._graph.order if not self._graph.children[k])

    def children_of(self, key: str) -> tuple[str, ...]:
        return self._graph.children[key]

    def ancestors_of(self, key: str) -> frozenset[str]:
        return self._graph.ancestors[key]

    def descendants_of(self, key: str) -> frozenset[str]:
        return self._graph.descendants[key]


WORKFLOW_FIELDS = ("name", "description", "run_timeout_s", "max_concurrent_runs", "steps")


def _parse_steps(raw_steps: object
                 ) -> tuple[list[tuple[int, StepDefinition]], list[Problem], set[str]]:
    """The steps that parse (with their index), the problems of those that do not, and every
    key the payload names (so a parent that failed to parse is not reported as unknown too)."""
    if not isinstance(raw_steps, list):
        return [], [], set()
    keys = [raw.get("key") if isinstance(raw, Mapping) else None for raw in raw_steps]
    counts = {k: keys.count(k) for k in keys if isinstance(k, str)}
    steps, problems = [], []
    for i, raw in enumerate(raw_steps):
        key = keys[i]
        usable = isinstance(key, str) and KEY_PATTERN.match(key) and counts[key] == 1
        step, found = _parse_step(raw, f"steps.{key}" if usable else f"steps[{i}]")
        problems += found
        if step is not None:
            steps.append((i, step))
    return steps, problems, set(counts)


def _parse_step(raw: object, prefix: str) -> tuple[StepDefinition | None, list[Problem]]:
    if not isinstance(raw, Mapping):
        return None, [Problem(prefix, f"a step is an object, not {_json_type(raw)}")]
    problems = [Problem(f"{prefix}.{k}", _unknown_field(k, STEP_FIELDS))
                for k in raw if k not in STEP_FIELDS]
    values = {k: raw[k] for k in STEP_FIELDS if k in raw and raw[k] is not None}
    values.setdefault("key", None)
    try:
        step = StepDefinition(**values)
    except _InvalidStep as e:
        return None, problems + [Problem(_join(prefix, p.path), p.message) for p in e.relative]
    return step, problems


def _analyse(steps: tuple[StepDefinition, ...]) -> validation.Graph:
    parents = {s.key: s.parents for s in steps}
    order, _ = topological_order(parents)
    children = children_map(parents)
    return validation.Graph(
        by_key={s.key: s for s in steps},
        order=tuple(order),
        children=children,
        ancestors=ancestors_map(parents, order),
        descendants=descendants_map(children, order),
    )
