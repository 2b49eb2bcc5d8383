"""Chrono's stand-in for ISM (search.stream_lifecycle): the plan it makes for a data stream's
backing indices, and the thresholds it reads from the shipped policies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from search import log_stream
from search.index_template import ISM_POLICY_FILE
from search.stream_lifecycle import DAY_MS, BackingIndex, Rules, StreamOutcome, plan

RULES = Rules(rollover_age_ms=DAY_MS, rollover_bytes=50 << 30, retention_ms=3 * DAY_MS)
NOW = 1_800_000_000_000


def index(generation: int, created_days_ago: float, *, documents: int = 1,
          primary_bytes: int = 1_000) -> BackingIndex:
    return BackingIndex(f".ds-logs-chrono.execution-default-{generation:06d}",
                        NOW - int(created_days_ago * DAY_MS), primary_bytes, documents)


def test_an_index_is_deleted_once_its_rollover_is_older_than_the_retention():
    indices = [index(1, 10), index(2, 4), index(3, 2.9), index(4, 0.5)]
    # 1 rolled over 4 days ago (when 2 was created): deleted; 2 rolled over 2.9 days ago: kept.
    assert plan(indices, RULES, at_ms=NOW).delete == (indices[0].name,)


def test_the_write_index_is_never_deleted_however_old():
    assert plan([index(1, 400)], RULES, at_ms=NOW).delete == ()


def test_the_write_index_rolls_over_when_a_day_old_or_at_the_size_limit_but_not_when_empty():
    assert plan([index(1, 1.0)], RULES, at_ms=NOW).rollover
    assert not plan([index(1, 0.9)], RULES, at_ms=NOW).rollover
    assert plan([index(1, 0.1, primary_bytes=50 << 30)], RULES, at_ms=NOW).rollover
    assert not plan([index(1, 9, documents=0)], RULES, at_ms=NOW).rollover
    assert plan([], RULES, at_ms=NOW) == plan([], RULES, at_ms=NOW + DAY_MS)


@given(st.lists(st.floats(min_value=0, max_value=60, allow_nan=False), min_size=1,
                max_size=12),
       st.integers(min_value=1, max_value=30))
def test_the_plan_deletes_exactly_the_generations_rolled_over_before_the_cutoff(ages, days):
    ages = sorted(ages, reverse=True)  # oldest first, as the stream lists them
    indices = [index(g, age) for g, age in enumerate(ages, start=1)]
    rules = Rules(DAY_MS, 50 << 30, days * DAY_MS)
    todo = plan(indices, rules, at_ms=NOW)
    expected = tuple(indices[g].name for g in range(len(indices) - 1)
                     if NOW - indices[g + 1].created_ms >= days * DAY_MS)
    assert todo.delete == expected
    assert indices[-1].name not in todo.delete
    # Deleting only ever takes a prefix: a newer generation never goes before an older one.
    assert todo.delete == tuple(i.name for i in indices[:len(todo.delete)])


@pytest.mark.parametrize("path", [ISM_POLICY_FILE, log_stream.ISM_POLICY_FILE])
def test_the_thresholds_are_those_of_the_shipped_ism_policies(path):
    rules = Rules.from_ism_policy(path, 14)
    assert rules == Rules(rollover_age_ms=DAY_MS, rollover_bytes=50 << 30,
                          retention_ms=14 * DAY_MS)


def test_a_policy_with_a_threshold_in_an_unknown_unit_is_refused_by_name(tmp_path):
    policy = json.loads(log_stream.ISM_POLICY_FILE.read_text())
    policy["policy"]["states"][0]["actions"][0]["rollover"]["min_index_age"] = "1 fortnight"
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    with pytest.raises(ValueError, match="min_index_age '1 fortnight'"):
        Rules.from_ism_policy(path, 14)


def test_the_report_lines_say_who_keeps_each_stream_and_what_was_done():
    name = "logs-chrono.audit-default"
    assert StreamOutcome(name, "ISM").lines(dry_run=False) == [
        f"data stream {name}: left to the engine's ISM policy"]
    assert StreamOutcome(name, "absent").lines(dry_run=False) == [
        f"data stream {name}: not created yet, nothing to do"]
    assert StreamOutcome(name, "chrono", error="refused").lines(dry_run=False) == [
        f"failed on data stream {name}: refused"]
    done = StreamOutcome(name, "chrono", rolled_over_to=".ds-x-000003", deleted=[".ds-x-000001"])
    assert done.lines(dry_run=True) == [
        f"would delete index .ds-x-000001 of data stream {name}",
        f"would roll data stream {name} over to .ds-x-000003"]
