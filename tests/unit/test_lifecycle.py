"""The execution lifecycle's rules (scheduler/lifecycle.py): the status sets the statements name
agree with the table of moves, and the ids are what every publish of an occurrence relies on."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from scheduler.lifecycle import (
    DELIVERED,
    IN_FLIGHT,
    INITIAL,
    NOT_STARTED,
    TRANSITIONS,
    execution_id_for,
    key_range,
    parse_retry_timer,
    retry_timer_id,
    sql_statuses,
)
from scheduler.models import FINISHED_EXECUTION_STATUSES, ExecutionStatus

S = ExecutionStatus


def test_every_status_has_its_row_in_the_table_of_moves():
    assert set(TRANSITIONS) == set(ExecutionStatus)
    for targets in TRANSITIONS.values():
        assert targets <= set(ExecutionStatus)


def test_not_started_is_exactly_what_a_start_moves_to_running():
    assert set(NOT_STARTED) == {s for s, targets in TRANSITIONS.items() if S.RUNNING in targets}


def test_a_cancel_reaches_every_execution_that_has_not_ended():
    for status in (*NOT_STARTED, S.RUNNING):
        assert S.CANCELLED in TRANSITIONS[status], status


def test_delivered_executions_can_end_failed_before_they_start():
    assert set(DELIVERED) <= set(NOT_STARTED)
    for status in DELIVERED:
        assert S.FAILED in TRANSITIONS[status]


def test_in_flight_is_not_started_or_running():
    assert set(IN_FLIGHT) == {*NOT_STARTED, S.RUNNING}


def test_a_finished_execution_moves_again_only_when_retried_by_hand():
    for status in FINISHED_EXECUTION_STATUSES:
        assert TRANSITIONS[status] <= {S.RETRY_WAIT}, status


def test_only_the_beat_makes_an_execution_scheduled_by_inserting_it():
    assert INITIAL == {S.SCHEDULED, S.SKIPPED}
    assert all(S.SCHEDULED not in targets for targets in TRANSITIONS.values())


def test_status_sets_read_as_sql_lists_in_their_order():
    assert sql_statuses(NOT_STARTED) == "'SCHEDULED', 'DISPATCHED', 'RETRY_WAIT'"
    assert sql_statuses(DELIVERED) == "'SCHEDULED', 'DISPATCHED'"


def test_every_publish_of_one_occurrence_has_the_same_execution_id():
    assert execution_id_for("job", 1_000) == execution_id_for("job", 1_000)
    assert execution_id_for("job", 1_000) != execution_id_for("job", 2_000)
    assert execution_id_for("job", 1_000) != execution_id_for("other", 1_000)
    assert execution_id_for("job", 1_000).version == 5


def test_a_retry_timer_id_reads_back_as_its_execution_attempt_and_partition_key():
    execution_id = str(uuid.uuid4())
    timer_id = retry_timer_id(execution_id, 3, 1_764_000_000_123)
    assert timer_id == f"{execution_id}#3#1764000000123"
    assert parse_retry_timer(timer_id) == (execution_id, 3, 1_764_000_000_123)


def test_a_retry_timer_written_before_the_partitioning_reads_back_without_a_key():
    execution_id = str(uuid.uuid4())
    assert retry_timer_id(execution_id, 3) == f"{execution_id}#3"
    assert parse_retry_timer(f"{execution_id}#3") == (execution_id, 3, None)


def test_a_batchs_key_range_is_the_whole_days_of_its_first_and_last_fire_times():
    """A batch's bound on scheduled_for prunes days, and is whole days: bounded by the batch's
    own fire times, a fan-out's (one instant the statistics had not seen) was estimated at one
    row and scanned whole for each row the statement updated."""
    fan_out = datetime(2026, 12, 7, 4, 30, 0, 123_000, tzinfo=UTC)
    assert key_range([fan_out] * 3) == (datetime(2026, 12, 7, tzinfo=UTC),
                                        datetime(2026, 12, 8, tzinfo=UTC)
                                        - timedelta(microseconds=1))
    late = datetime(2026, 12, 8, 0, 0, tzinfo=UTC)  # a partition's first instant
    first, last = key_range([late, fan_out])
    assert (first, last) == (datetime(2026, 12, 7, tzinfo=UTC),
                             datetime(2026, 12, 9, tzinfo=UTC) - timedelta(microseconds=1))
    assert first <= fan_out <= last and first <= late <= last
    # Days are UTC days (the partitions'), whatever the zone a time comes in.
    evening_in_new_york = datetime(2026, 12, 7, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert key_range([evening_in_new_york])[0] == datetime(2026, 12, 8, tzinfo=UTC)
