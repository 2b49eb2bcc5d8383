"""Conditions in CEL: compiled when defined, evaluated without ever raising."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workflows.conditions import MAX_CONDITION_LENGTH, Condition
from workflows.runs import StepState
from workflows.states import StepStatus

STEPS = {
    "extract": StepState(StepStatus.SUCCEEDED, {"rows": [1, 2, 3], "kind": "full"}),
    "load-users": StepState(StepStatus.SUCCEEDED, 7),
    "audit": StepState(StepStatus.SKIPPED),
}


def evaluate(source: str, run_input=None):
    return Condition.compile(source).evaluate(run_input or {}, STEPS)


@pytest.mark.parametrize(("source", "passed"), [
    ("true", True),
    ("input.full", True),
    ("size(steps.extract.result.rows) > 2", True),
    ('steps.extract.result.kind == "full" && input.n > 2.5', True),
    ('steps["load-users"].result == 7', True),
    ('steps.audit.status == "SKIPPED" && steps.audit.result == null', True),
    ("steps.extract.result.rows.exists(r, r > 2)", True),
    ("has(input.missing)", False),
    ("input.n in [1, 2]", False),
])
def test_conditions_see_the_input_and_the_ancestors(source, passed):
    assert evaluate(source, {"full": True, "n": 3}).passed is passed


@pytest.mark.parametrize(("source", "error"), [
    ("input.missing > 1", "no such field 'missing'"),
    ("input.n / 0 == 1", "division by zero"),
    ('input.n + "x" == 1', "No such overload: the operation is not defined for the given "
                           "operand types."),
    ("steps.audit.result.rows == 1", "could not be evaluated"),
    ("input.n", "gave 3 (int), not a boolean"),
])
def test_a_condition_that_cannot_be_evaluated_reports_why_and_raises_nothing(source, error):
    result = evaluate(source, {"n": 3})
    assert not result.passed
    assert error in result.error
    assert result.error.startswith(f"condition `{source}`")


def test_values_the_language_cannot_hold_are_an_error_not_an_exception():
    result = Condition.compile("input.x == 1").evaluate({"x": object()}, {})
    assert result.error and "could not be evaluated" in result.error


def test_the_steps_a_condition_names_are_found_in_both_spellings():
    condition = Condition.compile(
        'steps.extract.status == "SUCCEEDED" || steps["load-users"].result > 1 '
        '|| input.steps.audit == 1 || "steps.fake" == ""')
    assert condition.step_keys == {"extract", "load-users"}


@pytest.mark.parametrize(("source", "message"), [
    ("input.x &&", "invalid expression: at line 1, column 11"),
    ("inptu.x", "unknown name 'inptu'"),
    ("size(steps) > 0", "`steps` must be followed by a step key"),
    ("steps[input.key].status == 'x'", "`steps` must be followed by a step key"),
    ('steps["a\\"b"].status == "x"', "write a step key as a plain string"),
    ("", "a non-empty CEL expression"),
    ("x" * (MAX_CONDITION_LENGTH + 1), "at most 4000 characters"),
])
def test_expressions_that_cannot_be_used_are_refused_when_compiled(source, message):
    with pytest.raises(ValueError, match=message):
        Condition.compile(source)


def test_comprehension_variables_are_not_unknown_names():
    Condition.compile("input.rows.all(row, row.ok) && input.m.exists(k, k == 'a')")


def test_a_compiled_condition_compares_by_its_source():
    assert Condition.compile("input.a") == Condition.compile("input.a")


def test_the_cel_library_is_loaded_by_the_first_compile_not_by_django_setup():
    """Its package imports its command-line interface (prompt_toolkit, typer): ~150 ms at the
    start of every process that never compiles a condition."""
    code = (
        "import sys, django; django.setup()\n"
        "assert 'cel' not in sys.modules and 'prompt_toolkit' not in sys.modules, 'at setup'\n"
        "from workflows.conditions import Condition\n"
        "assert Condition.compile('input.x > 1').evaluate({'x': 2}, {}).passed\n"
        "assert 'cel' in sys.modules\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "chronoadmin.settings"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
