"""Trigger rules: from the states of a step's parents, whether it waits, runs, is skipped or fails.

The rules and their outcomes are Airflow's (``airflow/ti_deps/deps/trigger_rule_dep.py``, the
"Trigger Rules" section of Airflow's DAG concepts page), counted over the *direct* parents:

| rule | runs when | otherwise, once every parent has ended |
|---|---|---|
| all_success (default) | every parent SUCCEEDED | UPSTREAM_FAILED if one failed, else SKIPPED |
| all_failed | every parent failed | SKIPPED |
| all_done | every parent ended, whatever the outcome | (never) |
| all_skipped | every parent SKIPPED | SKIPPED |
| one_success | a parent SUCCEEDED (fires at once) | SKIPPED if all SKIPPED, else UPSTREAM_FAILED |
| one_failed | a parent failed (fires at once) | SKIPPED |
| one_done | a parent SUCCEEDED or FAILED (fires at once) | SKIPPED |
| none_failed | no parent failed | UPSTREAM_FAILED |
| none_failed_min_one_success | none failed, one SUCCEEDED | UPSTREAM_FAILED; all SKIPPED: SKIPPED |
| none_skipped | no parent SKIPPED | SKIPPED |
| always | at once, without waiting for its parents | (never) |

"Failed" means FAILED or UPSTREAM_FAILED, as in Airflow. A CANCELLED parent (Chrono's own
state; Airflow has none) counts as FAILED: it did not finish its work. ``one_done`` counts
SUCCEEDED and FAILED only, as Airflow's code does: an UPSTREAM_FAILED parent never ran.

Where Chrono is stricter than Airflow, on purpose (DESIGN.md decision 13, USERS.md row 17):
**a join is decided only when every parent has ended.** Airflow marks an ``all_success`` step
SKIPPED the moment one parent is skipped, even though a parent still running could fail later and
make it UPSTREAM_FAILED instead (and a branch's skip reaches an ``all_done`` join before the live
branch ends: airflow#35149, #7885, #11768). Chrono waits, so a step's outcome is a function of its
parents' final states alone, never of the order they ended in. The only decisions taken before
every parent has ended are the ones that cannot change afterwards and that the rule exists for:
``one_success``, ``one_failed`` and ``one_done`` *run* as soon as a parent qualifies ("fires as
soon as ...", Airflow's documentation), and ``always`` runs at once. The evaluator withholds even
those while a parent that is a branch step has not ended, because the branch may still decide the
step is not taken (airflow#55187).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from workflows.states import StepStatus


class TriggerRule(StrEnum):
    """When a step runs, in terms of its direct parents' outcomes (Airflow's names)."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ALL_SKIPPED = "all_skipped"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"


DEFAULT_TRIGGER_RULE = TriggerRule.ALL_SUCCESS
# Rules that run before every parent has ended (see the module docstring).
EARLY_FIRING_RULES = frozenset({TriggerRule.ONE_SUCCESS, TriggerRule.ONE_FAILED,
                                TriggerRule.ONE_DONE, TriggerRule.ALWAYS})
# Rules that mean something only over parents: a root step with one of these is refused.
JOINING_RULES = frozenset(set(TriggerRule) - {TriggerRule.ALL_SUCCESS, TriggerRule.ALWAYS})


class Verdict(StrEnum):
    """What a trigger rule says about a PENDING step."""

    WAIT = "WAIT"
    RUN = "RUN"
    SKIP = "SKIP"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"


_FAILURES = frozenset({StepStatus.FAILED, StepStatus.UPSTREAM_FAILED, StepStatus.CANCELLED})
_ANY = frozenset(StepStatus)


@dataclass(frozen=True)
class _Counts:
    succeeded: int
    failed: int  # FAILED, UPSTREAM_FAILED and CANCELLED
    ran_and_failed: int  # FAILED and CANCELLED: what one_done counts as done
    skipped: int
    total: int

    @classmethod
    def of(cls, statuses: list[StepStatus]) -> _Counts:
        return cls(
            succeeded=statuses.count(StepStatus.SUCCEEDED),
            failed=sum(s in _FAILURES for s in statuses),
            ran_and_failed=sum(s in (StepStatus.FAILED, StepStatus.CANCELLED) for s in statuses),
            skipped=statuses.count(StepStatus.SKIPPED),
            total=len(statuses),
        )


@dataclass(frozen=True)
class _Outcome:
    """A final verdict and which parent states caused it (for the reason shown to users)."""

    verdict: Verdict
    cause: frozenset[StepStatus] = _ANY
    phrase: str = ""


_RUN = _Outcome(Verdict.RUN)


def _all_success(c: _Counts) -> _Outcome:
    if c.failed:
        return _Outcome(Verdict.UPSTREAM_FAILED, _FAILURES)
    if c.skipped:
        return _Outcome(Verdict.SKIP, frozenset({StepStatus.SKIPPED}))
    return _RUN


def _all_failed(c: _Counts) -> _Outcome:
    if c.failed == c.total:
        return _RUN
    return _Outcome(Verdict.SKIP, frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED}))


def _all_skipped(c: _Counts) -> _Outcome:
    if c.skipped == c.total:
        return _RUN
    return _Outcome(Verdict.SKIP, _ANY - {StepStatus.SKIPPED})


def _one_success(c: _Counts) -> _Outcome:
    if c.succeeded:
        return _RUN
    if c.skipped == c.total:
        return _Outcome(Verdict.SKIP, phrase="every parent was skipped")
    return _Outcome(Verdict.UPSTREAM_FAILED, phrase="no parent succeeded")


def _one_failed(c: _Counts) -> _Outcome:
    return _RUN if c.failed else _Outcome(Verdict.SKIP, phrase="no parent failed")


def _one_done(c: _Counts) -> _Outcome:
    if c.succeeded or c.ran_and_failed:
        return _RUN
    return _Outcome(Verdict.SKIP, phrase="no parent succeeded or failed")


def _none_failed(c: _Counts) -> _Outcome:
    return _Outcome(Verdict.UPSTREAM_FAILED, _FAILURES) if c.failed else _RUN


def _none_failed_min_one_success(c: _Counts) -> _Outcome:
    if c.failed:
        return _Outcome(Verdict.UPSTREAM_FAILED, _FAILURES)
    if c.skipped == c.total:
        return _Outcome(Verdict.SKIP, phrase="every parent was skipped")
    return _RUN


def _none_skipped(c: _Counts) -> _Outcome:
    return _Outcome(Verdict.SKIP, frozenset({StepStatus.SKIPPED})) if c.skipped else _RUN


_FINAL: dict[TriggerRule, Callable[[_Counts], _Outcome]] = {
    TriggerRule.ALL_SUCCESS: _all_success,
    TriggerRule.ALL_FAILED: _all_failed,
    TriggerRule.ALL_DONE: lambda c: _RUN,
    TriggerRule.ALL_SKIPPED: _all_skipped,
    TriggerRule.ONE_SUCCESS: _one_success,
    TriggerRule.ONE_FAILED: _one_failed,
    TriggerRule.ONE_DONE: _one_done,
    TriggerRule.NONE_FAILED: _none_failed,
    TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS: _none_failed_min_one_success,
    TriggerRule.NONE_SKIPPED: _none_skipped,
    TriggerRule.ALWAYS: lambda c: _RUN,
}

# The parent states that let an early-firing rule run before every parent has ended.
_FIRES_ON: dict[TriggerRule, frozenset[StepStatus]] = {
    TriggerRule.ONE_SUCCESS: frozenset({StepStatus.SUCCEEDED}),
    TriggerRule.ONE_FAILED: _FAILURES,
    TriggerRule.ONE_DONE: frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED,
                                     StepStatus.CANCELLED}),
}


@dataclass(frozen=True)
class RuleDecision:
    """A trigger rule's verdict, with the parents that decided it or that it waits for."""

    verdict: Verdict
    rule: TriggerRule
    deciding: Mapping[str, StepStatus] = field(default_factory=dict)
    waiting_for: Mapping[str, StepStatus] = field(default_factory=dict)
    phrase: str = ""

    @property
    def text(self) -> str:
        """A sentence for people: "waiting for `load` (RUNNING)",
        "trigger rule none_failed: `extract` FAILED"."""
        if self.verdict is Verdict.WAIT:
            return "waiting for " + _list_states(self.waiting_for)
        lead = f"trigger rule {self.rule}: "
        if self.phrase:
            return f"{lead}{self.phrase} ({_list_states(self.deciding)})"
        return lead + _list_states(self.deciding)


def _list_states(states: Mapping[str, StepStatus]) -> str:
    return ", ".join(f"`{key}` ({status})" for key, status in states.items())


def decide(
    rule: TriggerRule, parents: Mapping[str, StepStatus], *, allow_early: bool = True
) -> RuleDecision:
    """The verdict of ``rule`` over ``parents`` (key → status, in the step's parent order).

    WAIT while a parent has not ended, except that an early-firing rule runs as soon as it can
    (``allow_early=False`` withholds that: the evaluator passes it while a branch parent has
    not ended). A step with no parents runs.
    """
    if not parents:
        return RuleDecision(Verdict.RUN, rule)
    waiting = {k: s for k, s in parents.items() if not s.is_terminal}
    if allow_early and rule in EARLY_FIRING_RULES:
        early = _early(rule, parents)
        if early is not None:
            return early
    if waiting:
        return RuleDecision(Verdict.WAIT, rule, waiting_for=waiting)
    outcome = _FINAL[rule](_Counts.of(list(parents.values())))
    deciding = {k: s for k, s in parents.items() if s in outcome.cause}
    return RuleDecision(outcome.verdict, rule, deciding=deciding, phrase=outcome.phrase)


def _early(rule: TriggerRule, parents: Mapping[str, StepStatus]) -> RuleDecision | None:
    if rule is TriggerRule.ALWAYS:
        return RuleDecision(Verdict.RUN, rule, deciding=dict(parents))
    firing = {k: s for k, s in parents.items() if s in _FIRES_ON[rule]}
    if not firing:
        return None
    return RuleDecision(Verdict.RUN, rule, deciding=firing)


def parse_trigger_rule(value: object) -> TriggerRule:
    """``value`` as a rule; ValueError naming the known rules when it is not one."""
    try:
        return TriggerRule(value)
    except ValueError:
        known = ", ".join(r.value for r in TriggerRule)
        raise ValueError(f"unknown rule {value!r} (expected one of {known})") from None
