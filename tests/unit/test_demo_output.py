"""The demo's line per ended execution: an occurrence that never ran says why, not a crash."""

from datetime import UTC, datetime, timedelta

from chronoadmin.management.commands.demo import _what_happened
from scheduler.models import Execution, ExecutionStatus

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_a_run_shows_its_lateness_and_worker():
    run = Execution(scheduled_for=AT, started_at=AT + timedelta(milliseconds=12),
                    finished_at=AT + timedelta(seconds=1), status=ExecutionStatus.SUCCEEDED,
                    worker_id="w1@host")
    assert _what_happened(run) == "started   12 ms late on w1@host"


def test_a_skipped_occurrence_shows_its_reason():
    skipped = Execution(scheduled_for=AT, finished_at=AT, status=ExecutionStatus.SKIPPED,
                        reason="the previous occurrence is still running (overlap policy skip)")
    assert _what_happened(skipped) == (
        "did not run: the previous occurrence is still running (overlap policy skip)")
    cancelled = Execution(scheduled_for=AT, finished_at=AT, status=ExecutionStatus.CANCELLED)
    assert _what_happened(cancelled) == "did not run: cancelled"
