"""Step arguments: the reference syntax, and resolving references against a run.

A step's ``args`` (a list) and ``kwargs`` (an object) are JSON. Anywhere inside them, an object
of exactly this shape is a *reference*, replaced by a value of the run when the step is
dispatched::

    {"$ref": "input"}                          the run's whole input
    {"$ref": "input.customer.id"}              a field of it (dots walk objects,
    {"$ref": "input.rows.0"}                   digits index lists)
    {"$ref": "steps.extract.result"}           an ancestor's result
    {"$ref": "steps.extract.result.rows"}      a field of it
    {"$ref": "steps.extract.status"}           an ancestor's status ("SUCCEEDED", "SKIPPED", ...)
    {"$ref": "map.item"} / {"$ref": "map.item.id"} / {"$ref": "map.index"}
                                               in a map step: this instance's item and index
    {"$ref": "steps.a.result.n", "default": 0} the default when the path is missing or the step
                                               has no result (it was skipped, or it failed)
    {"$literal": {"$ref": "not resolved"}}     the value inside, as it is (an escape hatch)

Only objects whose keys are ``$ref`` (with an optional ``default``) or ``$literal`` alone are
special; every other object, ``$``-keys included (a MongoDB query), is plain data. A reference
may name only the run's input, the step's *ancestors* and, in a map step, ``map``; the
definition checks that when it is created, so a run never meets a dangling name.

A reference to a step's result needs that step to have SUCCEEDED (a map step's result is the
list of its instances' results, in index order). A step whose trigger rule fires early
(``one_success``, ``one_failed``, ``one_done``) may start while a parent still runs: give its
references to parents a ``default``. Resolving one that cannot be resolved raises
:class:`~workflows.errors.ArgumentError` naming the argument (``kwargs.rows``); the evaluator
turns it into a FAILED step with that reason. Values are not copied: the engine serialises them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from workflows.errors import ArgumentError, TemplateError
from workflows.states import StepStatus

if TYPE_CHECKING:
    from workflows.definitions import StepDefinition

REF_KEY = "$ref"
LITERAL_KEY = "$literal"
DEFAULT_KEY = "default"
ROOTS = ("input", "steps", "map")
STEP_FIELDS = ("result", "status")
MAP_FIELDS = ("item", "index")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


class StepOutcome(Protocol):
    """What resolution reads of an ancestor: its status and, once SUCCEEDED, its result."""

    @property
    def status(self) -> StepStatus: ...

    @property
    def result(self) -> Any: ...


@dataclass(frozen=True)
class Reference:
    """One parsed ``{"$ref": ...}``: ``steps.extract.result.rows`` is root ``steps``, step
    ``extract``, field ``result``, path ``("rows",)``."""

    text: str
    root: str
    step: str | None
    field: str | None
    path: tuple[str, ...]
    default: Any = MISSING

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING


@dataclass(frozen=True)
class Literal:
    """A ``{"$literal": value}``: ``value`` is passed as it is."""

    value: Any


@dataclass(frozen=True)
class ResolvedArguments:
    """A step's arguments with every reference replaced by its value."""

    args: list[Any]
    kwargs: dict[str, Any]


def parse_reference(text: object, default: Any = MISSING) -> Reference:
    """``text`` as a reference; ValueError saying what is wrong with it otherwise."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"a reference is a dotted path such as 'input.id', not {text!r}")
    parts = text.split(".")
    if any(not part for part in parts):
        raise ValueError(f"reference {text!r} has an empty segment")
    root = parts[0]
    if root == "input":
        return Reference(text, root, None, None, tuple(parts[1:]), default)
    if root == "steps":
        return _step_reference(text, parts, default)
    if root == "map":
        return _map_reference(text, parts, default)
    raise ValueError(f"reference {text!r} must start with one of {', '.join(ROOTS)}")


def _step_reference(text: str, parts: list[str], default: Any) -> Reference:
    if len(parts) < 3 or parts[2] not in STEP_FIELDS:
        raise ValueError(f"reference {text!r} must read steps.<key>.result[...] or "
                         "steps.<key>.status")
    if parts[2] == "status" and len(parts) > 3:
        raise ValueError(f"reference {text!r}: a status has no fields")
    return Reference(text, "steps", parts[1], parts[2], tuple(parts[3:]), default)


def _map_reference(text: str, parts: list[str], default: Any) -> Reference:
    if len(parts) < 2 or parts[1] not in MAP_FIELDS:
        raise ValueError(f"reference {text!r} must read map.item[...] or map.index")
    if parts[1] == "index" and len(parts) > 2:
        raise ValueError(f"reference {text!r}: an index has no fields")
    return Reference(text, "map", None, parts[1], tuple(parts[2:]), default)


def compile_template(value: Any, path: str) -> Any:
    """``value`` with each reference object replaced by a :class:`Reference` and each literal
    by a :class:`Literal`; TemplateError naming the place of a malformed one."""
    if isinstance(value, list):
        return [compile_template(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if REF_KEY in value:
        extra = set(value) - {REF_KEY, DEFAULT_KEY}
        if extra:
            raise TemplateError(path, f"a reference takes only '$ref' and 'default', not "
                                   f"{', '.join(sorted(map(str, extra)))}")
        try:
            return parse_reference(value[REF_KEY], value.get(DEFAULT_KEY, MISSING))
        except ValueError as e:
            raise TemplateError(path, str(e)) from None
    if LITERAL_KEY in value and len(value) == 1:
        return Literal(value[LITERAL_KEY])
    return {k: compile_template(v, f"{path}.{k}") for k, v in value.items()}


def iter_references(template: Any, path: str) -> Iterator[tuple[str, Reference]]:
    """Every reference in a compiled template, with its place (``kwargs.rows``)."""
    if isinstance(template, Reference):
        yield path, template
    elif isinstance(template, list):
        for i, v in enumerate(template):
            yield from iter_references(v, f"{path}[{i}]")
    elif isinstance(template, dict):
        for k, v in template.items():
            yield from iter_references(v, f"{path}.{k}")


@dataclass(frozen=True)
class _Scope:
    run_input: Any
    states: Mapping[str, StepOutcome]
    map_item: Any
    map_index: int | None


def resolve_arguments(
    step: StepDefinition,
    run_input: Any,
    states: Mapping[str, StepOutcome],
    *,
    map_item: Any = MISSING,
    map_index: int | None = None,
) -> ResolvedArguments:
    """``step``'s args and kwargs with every reference resolved against the run's input, the
    states (status and result) of its ancestors and, for a map instance, its item and index.
    Raises ArgumentError naming the argument that cannot be resolved."""
    scope = _Scope(run_input, states, map_item, map_index)
    args = _resolve(step.args_template, scope, "args")
    kwargs = _resolve(step.kwargs_template, scope, "kwargs")
    return ResolvedArguments(args=args, kwargs=kwargs)


def resolve_value(template: Any, run_input: Any, states: Mapping[str, StepOutcome],
                  path: str) -> Any:
    """One compiled template (a map step's ``map_over``) resolved like an argument."""
    return _resolve(template, _Scope(run_input, states, MISSING, None), path)


def _resolve(template: Any, scope: _Scope, path: str) -> Any:
    if isinstance(template, Reference):
        return _resolve_reference(template, scope, path)
    if isinstance(template, Literal):
        return template.value
    if isinstance(template, list):
        return [_resolve(v, scope, f"{path}[{i}]") for i, v in enumerate(template)]
    if isinstance(template, dict):
        return {k: _resolve(v, scope, f"{path}.{k}") for k, v in template.items()}
    return template


def _resolve_reference(ref: Reference, scope: _Scope, path: str) -> Any:
    try:
        base = _base_value(ref, scope)
        return _walk(base, ref.path, ref.text)
    except LookupError as e:
        if ref.has_default:
            return ref.default
        raise ArgumentError(path, e.args[0]) from None


def _base_value(ref: Reference, scope: _Scope) -> Any:
    if ref.root == "input":
        return scope.run_input
    if ref.root == "map":
        if scope.map_index is None:
            raise LookupError(f"{ref.text!r} is only defined in a map step's instances")
        return scope.map_index if ref.field == "index" else scope.map_item
    state = scope.states.get(ref.step or "")
    if state is None:
        raise LookupError(f"step `{ref.step}` has not run in this run")
    if ref.field == "status":
        return str(state.status)
    if state.status is not StepStatus.SUCCEEDED:
        raise LookupError(f"step `{ref.step}` is {state.status}: it has no result")
    return state.result


def _walk(value: Any, path: tuple[str, ...], text: str) -> Any:
    parts = text.split(".")
    head = len(parts) - len(path)
    for depth, segment in enumerate(path):
        value = _child(value, segment, ".".join(parts[: head + depth]))
    return value


def _child(value: Any, segment: str, where: str) -> Any:
    if isinstance(value, Mapping):
        if segment in value:
            return value[segment]
        raise LookupError(f"{where!r} has no field {segment!r}")
    if isinstance(value, list):
        if segment.isdigit() and int(segment) < len(value):
            return value[int(segment)]
        raise LookupError(f"{where!r} is a list of {len(value)}: no item {segment!r}")
    raise LookupError(f"{where!r} is {_type_name(value)}, it has no field {segment!r}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__
    )
