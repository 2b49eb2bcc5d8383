"""The overlap policy's decision (scheduler/overlap.py): pure, every policy against every mix of
earlier occurrences still in flight, with properties checked over generated cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import models
from scheduler.overlap import (
    BUFFER_FULL_REASON,
    RECHECK_MS,
    SKIP_REASON,
    OverlapAction,
    OverlapDecision,
    OverlapPolicy,
    decide,
    is_guarded,
)

NOW = 1_000_000
IN_FLIGHT = ["SCHEDULED", "DISPATCHED", "RUNNING", "RETRY_WAIT"]
WAITING = ["SCHEDULED", "DISPATCHED", "RETRY_WAIT"]

policies = st.sampled_from(list(OverlapPolicy))
previous = st.lists(st.sampled_from(IN_FLIGHT), max_size=6)
next_fire = st.none() | st.integers(min_value=NOW + 1, max_value=NOW + 86_400_000)
now = st.integers(min_value=0, max_value=2**42)


def test_the_policies_are_the_models_choices():
    assert [p.value for p in OverlapPolicy] == [p.value for p in models.OverlapPolicy]


@pytest.mark.parametrize("policy", list(OverlapPolicy))
def test_with_nothing_in_flight_the_occurrence_fires(policy):
    assert decide(policy, [], next_ms=NOW + 60_000, now_ms=NOW).action == OverlapAction.FIRE


def test_allow_fires_whatever_runs_or_waits():
    decision = decide("allow", ["RUNNING", "SCHEDULED"], next_ms=NOW + 60_000, now_ms=NOW)
    assert (decision.action, decision.next_ms) == (OverlapAction.FIRE, NOW + 60_000)


def test_skip_records_the_occurrence_skipped_and_keeps_the_next_one():
    decision = decide("skip", ["RUNNING"], next_ms=NOW + 60_000, now_ms=NOW)
    assert decision == OverlapDecision(OverlapAction.SKIP, NOW + 60_000, SKIP_REASON)


def test_cancel_previous_fires_and_cancels_what_was_before():
    decision = decide("cancel_previous", ["RUNNING", "DISPATCHED"], next_ms=None, now_ms=NOW)
    assert decision.action == OverlapAction.FIRE_AND_CANCEL_PREVIOUS


def test_buffer_one_holds_the_occurrence_while_the_previous_one_runs():
    decision = decide("buffer_one", ["RUNNING"], next_ms=NOW + 60_000, now_ms=NOW)
    assert (decision.action, decision.next_ms) == (OverlapAction.HOLD, NOW + RECHECK_MS)


def test_buffer_one_looks_again_at_the_next_occurrence_when_it_comes_before_the_recheck():
    decision = decide("buffer_one", ["RUNNING"], next_ms=NOW + 300, now_ms=NOW)
    assert (decision.action, decision.next_ms) == (OverlapAction.HOLD, NOW + 300)


def test_buffer_one_of_a_job_with_no_next_occurrence_looks_again_after_the_recheck():
    decision = decide("buffer_one", ["RUNNING"], next_ms=None, now_ms=NOW)
    assert (decision.action, decision.next_ms) == (OverlapAction.HOLD, NOW + RECHECK_MS)


@pytest.mark.parametrize("waiting", WAITING)
def test_buffer_one_skips_an_occurrence_when_one_already_waits(waiting):
    decision = decide("buffer_one", ["RUNNING", waiting], next_ms=NOW + 60_000, now_ms=NOW)
    assert (decision.action, decision.reason) == (OverlapAction.SKIP, BUFFER_FULL_REASON)


def test_only_cron_jobs_under_a_policy_other_than_allow_are_looked_up():
    assert is_guarded("skip", recurring=True)
    assert not is_guarded("allow", recurring=True)
    assert not is_guarded("skip", recurring=False)


@given(policy=policies, statuses=previous, next_ms=next_fire, now_ms=now)
def test_only_a_hold_moves_the_jobs_next_look(policy, statuses, next_ms, now_ms):
    decision = decide(policy, statuses, next_ms=next_ms, now_ms=now_ms)
    if decision.action != OverlapAction.HOLD:
        assert decision.next_ms == next_ms


@given(policy=policies, statuses=previous, next_ms=next_fire, now_ms=now)
def test_a_hold_looks_again_soon_and_never_after_the_next_occurrence(
    policy, statuses, next_ms, now_ms
):
    decision = decide(policy, statuses, next_ms=next_ms, now_ms=now_ms)
    if decision.action == OverlapAction.HOLD:
        assert policy == OverlapPolicy.BUFFER_ONE
        assert set(statuses) == {"RUNNING"}
        assert decision.next_ms <= now_ms + RECHECK_MS
        assert next_ms is None or decision.next_ms <= next_ms


@given(policy=policies, statuses=previous, next_ms=next_fire, now_ms=now)
def test_an_occurrence_is_held_back_only_when_something_is_in_flight(
    policy, statuses, next_ms, now_ms
):
    decision = decide(policy, statuses, next_ms=next_ms, now_ms=now_ms)
    fires = decision.action in (OverlapAction.FIRE, OverlapAction.FIRE_AND_CANCEL_PREVIOUS)
    if not statuses or policy == OverlapPolicy.ALLOW:
        assert decision.action == OverlapAction.FIRE
    if not fires:
        assert statuses and policy in (OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE)
    if decision.action == OverlapAction.SKIP:
        assert decision.reason in (SKIP_REASON, BUFFER_FULL_REASON)


@given(policy=policies, statuses=previous, next_ms=next_fire, now_ms=now, data=st.data())
def test_the_decision_depends_on_which_statuses_are_in_flight_not_their_order_or_count(
    policy, statuses, next_ms, now_ms, data
):
    shuffled = data.draw(st.permutations(statuses))
    repeated = shuffled + data.draw(st.lists(st.sampled_from(statuses))) if statuses else []
    decision = decide(policy, statuses, next_ms=next_ms, now_ms=now_ms)
    assert decide(policy, repeated, next_ms=next_ms, now_ms=now_ms) == decision
