"""The workflow package's exceptions: one family, rooted at :class:`WorkflowError`.

A bad definition is reported whole: :class:`DefinitionError` carries every problem found, each
as a ``(path, message)`` pair whose path names the offending field the way the REST API's
payload spells it (``steps[3].parents[0]``, ``steps.load.trigger_rule``), so a 400 response can
point at each one. Errors that happen while a run advances (a condition that cannot be
evaluated, an argument that cannot be resolved) never escape the evaluator: they become a
FAILED step with its reason. The exceptions for those cases exist so the pure helpers can say
what went wrong; the evaluator catches them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class WorkflowError(Exception):
    """Raised for any workflow problem; the base of the package's exceptions."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition: where (a field path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class DefinitionError(WorkflowError):
    """Raised when a workflow definition is invalid; ``problems`` lists every (path, message)."""

    def __init__(self, problems: Iterable[Problem | tuple[str, str]]) -> None:
        self.problems: tuple[Problem, ...] = tuple(
            p if isinstance(p, Problem) else Problem(*p) for p in problems
        )
        super().__init__("; ".join(str(p) for p in self.problems) or "invalid definition")

    def paths(self) -> list[str]:
        """The field paths named, in the order found."""
        return [p.path for p in self.problems]


class TemplateError(WorkflowError, ValueError):
    """Raised when a step's argument template holds a malformed reference (the definition's
    validation reports it as a problem); ``path`` is its place."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


class ArgumentError(WorkflowError):
    """Raised when a step's argument reference cannot be resolved at run time (the evaluator
    turns it into a FAILED step); ``path`` is the argument's place, e.g. ``kwargs.rows``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


class InvalidEvent(WorkflowError):
    """Raised when an event does not fit the run's current state: an unknown step, a step that
    is not in the state the event needs (a result for a step that is not RUNNING), an attempt
    other than the current one, or an action a run in its status cannot take."""


# A sub_workflow step's failures never escape either: they end the step FAILED with one of
# these as its ``error_type`` (workflows.subworkflows), so the audit rows and a retry policy's
# ``non_retryable`` can name them.


class SubWorkflowFailed(WorkflowError):
    """Stands for a sub_workflow step whose child run ended FAILED or TIMED_OUT."""


class SubWorkflowNotFound(WorkflowError):
    """Stands for a sub_workflow step naming a workflow its tenant has not defined."""


class SubWorkflowCycle(WorkflowError):
    """Stands for a sub_workflow step refused because its workflow is already one of the run's
    ancestors (A starts B starts A)."""
