"""Trigger rules, as a table: every rule against every mix of two parents' outcomes.

The expected verdicts are written out by hand from Airflow's documented semantics (see
workflows/rules.py), then checked twice: against :func:`workflows.rules.decide` directly, and
end to end through the evaluator with parents that really end that way.
"""

from __future__ import annotations

import pytest

from tests.unit.workflows.driver import Run, workflow
from workflows.rules import (
    DEFAULT_TRIGGER_RULE,
    JOINING_RULES,
    TriggerRule,
    Verdict,
    decide,
    parse_trigger_rule,
)
from workflows.states import StepStatus

S, F, K, U = (StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.SKIPPED,
              StepStatus.UPSTREAM_FAILED)
CODE = {"S": S, "F": F, "K": K, "U": U}
MIXES = ("SS", "FF", "KK", "UU", "SF", "SK", "SU", "FK", "FU", "KU")
R, SKIP, UF = Verdict.RUN, Verdict.SKIP, Verdict.UPSTREAM_FAILED

#                    SS    FF    KK    UU    SF    SK    SU    FK    FU    KU
TABLE = {
    "all_success": (R, UF, SKIP, UF, UF, SKIP, UF, UF, UF, UF),
    "all_failed": (SKIP, R, SKIP, R, SKIP, SKIP, SKIP, SKIP, R, SKIP),
    "all_done": (R, R, R, R, R, R, R, R, R, R),
    "all_skipped": (SKIP, SKIP, R, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP, SKIP),
    "one_success": (R, UF, SKIP, UF, R, R, R, UF, UF, UF),
    "one_failed": (SKIP, R, SKIP, R, R, SKIP, R, R, R, R),
    "one_done": (R, R, SKIP, SKIP, R, R, R, R, R, SKIP),
    "none_failed": (R, UF, R, UF, UF, R, UF, UF, UF, UF),
    "none_failed_min_one_success": (R, UF, SKIP, UF, UF, R, UF, UF, UF, UF),
    "none_skipped": (R, R, SKIP, R, R, SKIP, R, SKIP, R, SKIP),
    "always": (R, R, R, R, R, R, R, R, R, R),
}
CASES = [(rule, mix, TABLE[rule][i]) for rule in TABLE for i, mix in enumerate(MIXES)]


def test_the_table_covers_every_rule():
    assert set(TABLE) == {r.value for r in TriggerRule}


@pytest.mark.parametrize(("rule", "mix", "verdict"), CASES)
def test_rule_verdict_once_both_parents_have_ended(rule, mix, verdict):
    parents = {"a": CODE[mix[0]], "b": CODE[mix[1]]}
    assert decide(TriggerRule(rule), parents).verdict is verdict


def _parent_ending(key: str, code: str) -> list[dict]:
    """Steps that make ``key`` end as ``code``: UPSTREAM_FAILED needs a failed parent of its
    own, SKIPPED a false condition."""
    if code == "U":
        return [{"key": f"{key}_up"}, {"key": key, "parents": [f"{key}_up"]}]
    if code == "K":
        return [{"key": key, "condition": "false"}]
    return [{"key": key}]


@pytest.mark.parametrize(("rule", "mix", "verdict"), CASES)
def test_rule_verdict_end_to_end_through_the_evaluator(rule, mix, verdict):
    definition = workflow(*_parent_ending("a", mix[0]), *_parent_ending("b", mix[1]),
                          {"key": "join", "parents": ["a", "b"], "trigger_rule": rule})
    run = Run(definition)
    run.start()
    for key, code in (("a", mix[0]), ("b", mix[1])):
        if code == "S":
            run.succeed(key)
        elif code == "F":
            run.fail(key)
        elif code == "U":
            run.fail(f"{key}_up")
    expected = {R: "READY", SKIP: "SKIPPED", UF: "UPSTREAM_FAILED"}[verdict]
    assert run.status("join") == expected


def test_all_success_is_the_default():
    assert DEFAULT_TRIGGER_RULE is TriggerRule.ALL_SUCCESS


@pytest.mark.parametrize("rule", [r for r in TriggerRule if r not in (
    TriggerRule.ONE_SUCCESS, TriggerRule.ONE_FAILED, TriggerRule.ONE_DONE, TriggerRule.ALWAYS)])
@pytest.mark.parametrize("ended", [S, F, K, U])
def test_a_join_waits_for_every_parent_whatever_the_others_did(rule, ended):
    decision = decide(rule, {"a": ended, "b": StepStatus.RUNNING})
    assert decision.verdict is Verdict.WAIT
    assert decision.waiting_for == {"b": StepStatus.RUNNING}


def test_all_success_with_a_skipped_parent_waits_because_a_live_parent_could_still_fail():
    assert decide(TriggerRule.ALL_SUCCESS, {"a": K, "b": StepStatus.RUNNING}).verdict \
        is Verdict.WAIT
    assert decide(TriggerRule.ALL_SUCCESS, {"a": K, "b": F}).verdict is UF


@pytest.mark.parametrize(("rule", "firing"), [
    (TriggerRule.ONE_SUCCESS, S), (TriggerRule.ONE_FAILED, F), (TriggerRule.ONE_FAILED, U),
    (TriggerRule.ONE_DONE, S), (TriggerRule.ONE_DONE, F)])
def test_one_rules_fire_as_soon_as_one_parent_qualifies(rule, firing):
    decision = decide(rule, {"a": firing, "b": StepStatus.RUNNING, "c": StepStatus.PENDING})
    assert decision.verdict is R
    assert decision.deciding == {"a": firing}


@pytest.mark.parametrize(("rule", "ended"), [
    (TriggerRule.ONE_SUCCESS, F), (TriggerRule.ONE_SUCCESS, K), (TriggerRule.ONE_FAILED, S),
    (TriggerRule.ONE_DONE, K), (TriggerRule.ONE_DONE, U)])
def test_one_rules_decide_against_running_only_once_every_parent_has_ended(rule, ended):
    assert decide(rule, {"a": ended, "b": StepStatus.RUNNING}).verdict is Verdict.WAIT


def test_always_runs_without_waiting_for_its_parents():
    parents = {"a": StepStatus.PENDING, "b": StepStatus.RUNNING}
    assert decide(TriggerRule.ALWAYS, parents).verdict is R


def test_early_firing_can_be_withheld():
    parents = {"a": S, "b": StepStatus.RUNNING}
    assert decide(TriggerRule.ONE_SUCCESS, parents, allow_early=False).verdict is Verdict.WAIT
    assert decide(TriggerRule.ALWAYS, parents, allow_early=False).verdict is Verdict.WAIT


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_a_step_without_parents_runs(rule):
    assert decide(rule, {}).verdict is R


@pytest.mark.parametrize(("rule", "verdict"), [
    (TriggerRule.ALL_SUCCESS, UF), (TriggerRule.ALL_FAILED, R), (TriggerRule.NONE_FAILED, UF),
    (TriggerRule.ONE_FAILED, R), (TriggerRule.ONE_DONE, R)])
def test_a_cancelled_parent_counts_as_failed(rule, verdict):
    assert decide(rule, {"a": StepStatus.CANCELLED}).verdict is verdict


def test_reasons_name_the_parents_that_decided():
    decision = decide(TriggerRule.NONE_FAILED, {"extract": F, "load": S})
    assert decision.text == "trigger rule none_failed: `extract` (FAILED)"
    decision = decide(TriggerRule.ONE_SUCCESS, {"a": F, "b": K})
    assert decision.text == "trigger rule one_success: no parent succeeded (`a` (FAILED), " \
                            "`b` (SKIPPED))"
    waiting = decide(TriggerRule.ALL_SUCCESS, {"load": StepStatus.RUNNING, "x": S})
    assert waiting.text == "waiting for `load` (RUNNING)"


def test_rules_that_join_are_every_rule_but_the_default_and_always():
    assert JOINING_RULES == set(TriggerRule) - {TriggerRule.ALL_SUCCESS, TriggerRule.ALWAYS}


def test_an_unknown_rule_is_refused_with_the_known_ones_listed():
    with pytest.raises(ValueError, match=r"unknown rule 'all_sucess' \(expected one of "
                                         r"all_success, all_failed, .*always\)"):
        parse_trigger_rule("all_sucess")
    assert parse_trigger_rule("none_failed") is TriggerRule.NONE_FAILED
