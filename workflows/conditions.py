"""Step conditions: safe expressions over the run's input and its ancestors' outcomes.

A step may carry a ``condition``, written in CEL (Google's Common Expression Language, the
language of Kubernetes admission policies and Firebase rules). It is evaluated when the step's
trigger rule says RUN; true lets the step run, false SKIPS it (and its subtree, by skip
propagation through the trigger rules of the steps below). An expression sees two names::

    input                     the run's input (JSON)
    steps.<key>.status        an ancestor's status: "SUCCEEDED", "SKIPPED", "FAILED", ...
    steps.<key>.result        an ancestor's result (null unless it SUCCEEDED)
    steps["load-users"]...    the same, for a key that is not a CEL identifier

for example ``input.full_reload || size(steps.extract.result.rows) > 0``. It must yield a
boolean. An expression that cannot be evaluated (a missing field, a type mismatch, a division
by zero) or that yields anything else makes the step FAILED with the reason; no exception leaves
:meth:`Condition.evaluate`.

**Why CEL, and this library.** CEL is non-Turing-complete (no loops, no recursion, no I/O, every
expression ends in time linear in its input), it is a standard with a specification, and it has
no access to Python at all: nothing here goes near ``eval``. The implementation is PyPI's
``common-expression-language`` (Apache-2.0): Python bindings to the Rust ``cel`` interpreter,
with binary wheels for CPython 3.11 on linux x86_64, a compile step that reports syntax errors
with their column, and the names an expression uses (so a definition is checked when it is
created). Measured here: ~15 µs to compile, ~7 µs to evaluate a typical condition. The other
candidates were ``cel-python`` (pure Python, ~25x slower per evaluation, and it pulls pendulum,
lark and google-re2) and JSON Logic (``json-logic`` last released in 2015, and JSON-encoded
logic is harder to read in a definition than a one-line expression). The library's regular
expressions (``matches``) are RE2-style, linear-time: no catastrophic backtracking.

Which ancestors an expression names is read from its tokens (``steps.<key>`` and
``steps["<key>"]``), since the library reports only top-level names; ``steps`` must always be
followed by a key, so no expression can reach a step the definition did not check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from workflows.arguments import StepOutcome
from workflows.states import StepStatus

MAX_CONDITION_LENGTH = 4_000
ROOT_NAMES = frozenset({"input", "steps"})
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_ERROR_TEXT_LIMIT = 300

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?)
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def library() -> ModuleType:
    """The CEL library, imported when first needed: its package imports its own command-line
    interface (typer, prompt_toolkit, rich: ~150 ms and ~10 MB), which every Chrono process
    that never compiles a condition (the beat, the reaper, a worker, each ``chrono`` command)
    paid at start. The workflow engine loads it at its own start
    (``chrono workflow-engine``), so no run's first condition waits for it."""
    import cel

    return cel


@dataclass(frozen=True)
class ConditionResult:
    """A condition's verdict: ``passed``, or ``error`` saying why it could not be evaluated."""

    passed: bool
    error: str | None = None


@dataclass(frozen=True)
class Condition:
    """A compiled condition; build it with :meth:`compile`."""

    source: str
    step_keys: frozenset[str]
    program: Any = field(compare=False, repr=False)

    @classmethod
    def compile(cls, source: object) -> Condition:
        """Compile ``source``; ValueError saying what is wrong (syntax, unknown names, a
        ``steps`` not followed by a key) when it cannot be used."""
        if not isinstance(source, str) or not source.strip():
            raise ValueError("a condition is a non-empty CEL expression string")
        if len(source) > MAX_CONDITION_LENGTH:
            raise ValueError(f"a condition is at most {MAX_CONDITION_LENGTH} characters")
        try:
            program = library().compile(source)
        except Exception as e:  # the library raises ValueError; translate whatever it raises
            raise ValueError(f"invalid expression: {_syntax_error(str(e))}") from None
        tokens = _tokenize(source)
        _check_names(program, tokens)
        return cls(source=source, step_keys=frozenset(_step_keys(tokens)), program=program)

    def evaluate(self, run_input: Any, steps: Mapping[str, StepOutcome]) -> ConditionResult:
        """Evaluate over the run's input and the outcomes of (at least) the named ancestors."""
        try:
            value = self.program.execute(_context(run_input, steps, self.step_keys))
        except BaseException as e:  # noqa: B036 - a Rust panic arrives as a BaseException
            if isinstance(e, KeyboardInterrupt | SystemExit | GeneratorExit):
                raise
            return ConditionResult(False, f"condition `{self.source}` could not be evaluated: "
                                          f"{_describe(e)}")
        if not isinstance(value, bool):
            return ConditionResult(False, f"condition `{self.source}` gave {value!r} "
                                          f"({type(value).__name__}), not a boolean")
        return ConditionResult(value)


def _context(run_input: Any, steps: Mapping[str, StepOutcome], keys: frozenset[str]) -> dict:
    view = {}
    for key in keys:
        outcome = steps.get(key)
        if outcome is None:
            continue
        succeeded = outcome.status is StepStatus.SUCCEEDED
        view[key] = {"status": str(outcome.status),
                     "result": outcome.result if succeeded else None}
    return {"input": run_input, "steps": view}


def _describe(error: BaseException) -> str:
    name = {KeyError: "no such field", IndexError: "index out of range"}.get(type(error))
    text = f"{name} {error}" if name else _first_lines(str(error))
    return text[:_ERROR_TEXT_LIMIT]


def _syntax_error(text: str) -> str:
    """The library's parse error without its echo of the source: "at line 1, column 10:
    Syntax error: mismatched input ..."."""
    found = _PARSE_ERROR.search(text)
    if not found:
        return _first_lines(text)
    line, column, message = found.groups()
    return f"at line {line}, column {column}: {message.strip()}"[:_ERROR_TEXT_LIMIT]


_PARSE_ERROR = re.compile(r"<input>:(\d+):(\d+): ([^\n|]*)")


def _first_lines(text: str) -> str:
    """The library's first sentence: its messages go on with advice for CEL programmers."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return (flat[: end + 1] if end > 0 else flat)[:_ERROR_TEXT_LIMIT]


def _tokenize(source: str) -> list[_Token]:
    tokens = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "punct"
        if kind != "space":
            tokens.append(_Token(kind, match.group()))
    return tokens


def _check_names(program: Any, tokens: list[_Token]) -> None:
    bound = _comprehension_variables(tokens)
    unknown = sorted(set(program.variables()) - ROOT_NAMES - bound)
    if unknown:
        raise ValueError(f"unknown name {unknown[0]!r} (a condition sees `input` and `steps`)")


def _comprehension_variables(tokens: list[_Token]) -> set[str]:
    """Names bound by ``.exists(x, ...)`` and the other macros: an identifier followed by a
    comma right after a macro's opening parenthesis."""
    bound: set[str] = set()
    for i, token in enumerate(tokens[:-2]):
        if token.kind == "ident" and token.text in _MACROS and tokens[i + 1].text == "(":
            j = i + 2
            while j + 1 < len(tokens) and tokens[j].kind == "ident" and tokens[j + 1].text == ",":
                bound.add(tokens[j].text)
                j += 2
    return bound


def _step_keys(tokens: list[_Token]) -> list[str]:
    keys = []
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text != "steps":
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue  # a field called "steps" of something else, e.g. input.steps
        keys.append(_key_after(tokens, i))
    return keys


def _key_after(tokens: list[_Token], i: int) -> str:
    following = tokens[i + 1 : i + 4]
    texts = [t.text for t in following]
    if len(following) >= 2 and texts[0] == "." and following[1].kind == "ident":
        return following[1].text
    if len(following) == 3 and texts[0] == "[" and following[1].kind == "string" \
            and texts[2] == "]":
        return _plain_string(following[1].text)
    raise ValueError('`steps` must be followed by a step key: steps.<key> or steps["<key>"]')


def _plain_string(literal: str) -> str:
    quote = literal.lstrip("rRbB")
    inner = quote[3:-3] if quote[:3] in ("'''", '"""') else quote[1:-1]
    if "\\" in inner or literal[0] in "bB":
        raise ValueError('write a step key as a plain string: steps["<key>"]')
    return inner
