"""What a worker does when PostgreSQL fails its start or finish: retry, then never lose the
message (a start that cannot be recorded sends the message back to the queue)."""

from __future__ import annotations

import psycopg
import pytest
from celery.exceptions import Reject
from django.db import OperationalError

from chronoadmin.celery import app
from scheduler import rollups, worker
from scheduler.attempts import Outcome
from scheduler.batching import Coalescer
from scheduler.consumer_recording import EarlyStart
from scheduler.executions import StartRequest
from scheduler.lifecycle import StartedExecution

RAN: list[int] = []


@app.task(name="tests.unit.recorded", bind=True)
def recorded(self, n: int) -> int:
    RAN.append(n)
    return n


class Failing:
    def __init__(self, failures: int, result) -> None:
        self.failures = failures
        self.result = result
        self.calls = 0

    def __call__(self, items):
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError("deadlock detected")
        return [self.result(item) for item in items]


def call_as_chrono(task, *args):
    task.push_request(chrono_execution_id="00000000-0000-4000-8000-000000000001",
                      chrono_tenant_id="00000000-0000-4000-8000-0000000000aa",
                      chrono_attempt="1", hostname="w@test", args=args, kwargs={})
    try:
        return task(*args)
    finally:
        task.pop_request()


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(worker.time, "sleep", lambda s: None)
    # Grants are not what these tests are about (tests/e2e/test_grants_worker.py): granted.
    monkeypatch.setattr(worker.grants, "refusal", lambda tenant_id, task_name, queue: None)
    monkeypatch.setattr(worker.connection, "close_if_unusable_or_obsolete", lambda: None)
    monkeypatch.setattr(worker, "lease_keeper", lambda config: type(
        "Keeper", (), {"hold": lambda *a: None, "release": lambda *a: None})())
    # Counted in memory only: the process's recorder starts a writer thread, whose flushes
    # (its last at exit) went to the development database, so `make demo` after `make test`
    # listed tests.unit.failing among the dashboard's top failing tasks.
    monkeypatch.setattr(worker.rollups, "recorder", rollups.Accumulator)
    RAN.clear()


def started(request) -> StartedExecution:
    return StartedExecution(request.execution_id, 7, request.attempt)


def test_a_start_failing_every_time_requeues_the_message_and_runs_nothing(monkeypatch):
    starts = Failing(failures=99, result=started)
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    with pytest.raises(Reject) as raised:
        call_as_chrono(recorded, 1)
    assert raised.value.requeue is True
    assert starts.calls == worker.RECORD_ATTEMPTS
    assert RAN == []


def test_a_deadlock_victim_start_is_tried_again_and_the_task_runs_once(monkeypatch):
    starts = Failing(failures=1, result=started)
    finishes = Failing(failures=1, result=lambda item: True)
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    monkeypatch.setattr(worker, "_finishes", Coalescer(finishes))
    assert call_as_chrono(recorded, 2) == 2
    assert RAN == [2]
    assert (starts.calls, finishes.calls) == (2, 2)


def test_a_finish_that_cannot_be_recorded_still_returns_the_result(monkeypatch):
    monkeypatch.setattr(worker, "_starts", Coalescer(Failing(0, started)))
    finishes = Failing(failures=99, result=lambda item: True)
    monkeypatch.setattr(worker, "_finishes", Coalescer(finishes))
    assert call_as_chrono(recorded, 3) == 3  # the lease expires; the reaper decides
    assert RAN == [3]
    assert finishes.calls == worker.RECORD_ATTEMPTS


class Unreachable(Failing):
    """PostgreSQL away for ``failures`` calls, as during a failover: the connection is lost,
    not the statement refused."""

    def __call__(self, items):
        self.calls += 1
        if self.calls <= self.failures:
            try:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            except psycopg.OperationalError as cause:
                raise OperationalError(str(cause)) from cause
        return [self.result(item) for item in items]


def test_a_finish_waits_out_a_failover_and_records_the_success(monkeypatch):
    monkeypatch.setattr(worker, "_starts", Coalescer(Failing(0, started)))
    finishes = Unreachable(failures=worker.RECORD_ATTEMPTS * 5, result=lambda item: True)
    monkeypatch.setattr(worker, "_finishes", Coalescer(finishes))
    assert call_as_chrono(recorded, 4) == 4
    assert finishes.calls == worker.RECORD_ATTEMPTS * 5 + 1, "the success was not recorded"


def test_a_start_gives_up_after_the_outage_budget_and_requeues(monkeypatch):
    monkeypatch.setattr(worker, "RECORD_OUTAGE_S", 0.05)
    starts = Unreachable(failures=10**9, result=started)
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    with pytest.raises(Reject) as raised:
        call_as_chrono(recorded, 5)
    assert raised.value.requeue is True
    assert starts.calls > worker.RECORD_ATTEMPTS, "gave up as on a refused statement"
    assert RAN == []


def test_a_grant_look_up_that_cannot_reach_postgresql_waits_it_out_and_runs_the_task(
        monkeypatch):
    looks = {"calls": 0}

    def refusal(tenant_id, task_name, queue):
        looks["calls"] += 1
        if looks["calls"] <= 3:
            Unreachable(failures=1, result=None)([])
        return None

    monkeypatch.setattr(worker.grants, "refusal", refusal)
    monkeypatch.setattr(worker, "_starts", Coalescer(Failing(0, started)))
    monkeypatch.setattr(worker, "_finishes", Coalescer(Failing(0, lambda item: True)))
    assert call_as_chrono(recorded, 6) == 6
    assert (looks["calls"], RAN) == (4, [6])


def test_a_grant_look_up_failing_past_the_outage_budget_requeues_the_message(monkeypatch):
    monkeypatch.setattr(worker, "RECORD_OUTAGE_S", 0.05)
    monkeypatch.setattr(worker.grants, "refusal",
                        lambda *a: Unreachable(failures=1, result=None)([]))
    with pytest.raises(Reject) as raised:
        call_as_chrono(recorded, 7)
    assert raised.value.requeue is True
    assert RAN == []


@app.task(name="tests.unit.failing", bind=True)
def failing(self, n: int) -> int:
    RAN.append(n)
    raise ValueError(f"failing {n}")


def test_a_deadlock_victim_end_of_a_failed_attempt_is_tried_again_and_the_tasks_error_kept(
        monkeypatch):
    """A failed attempt's end shares its job row with the beat's record of the dispatch; a
    deadlock victim there is tried again, as a start or a finish is, rather than leaving the
    run RUNNING for the reaper."""
    monkeypatch.setattr(worker, "_starts", Coalescer(Failing(0, started)))
    ends = Failing(failures=1, result=lambda item: Outcome("e-9", "FAILED", 1))
    monkeypatch.setattr(worker, "end_attempt", lambda *a, **k: ends([None])[0])
    with pytest.raises(ValueError, match="failing 9"):
        call_as_chrono(failing, 9)
    assert (RAN, ends.calls) == ([9], 2)


def test_an_end_of_attempt_that_cannot_be_recorded_leaves_the_run_to_the_reaper(
        monkeypatch, caplog):
    monkeypatch.setattr(worker, "_starts", Coalescer(Failing(0, started)))
    ends = Failing(failures=99, result=lambda item: None)
    monkeypatch.setattr(worker, "end_attempt", lambda *a, **k: ends([None])[0])
    with pytest.raises(ValueError, match="failing 10"):  # the task's own error, not the database's
        call_as_chrono(failing, 10)
    assert ends.calls == worker.RECORD_ATTEMPTS
    assert any("could not record the failure of" in r.getMessage() for r in caplog.records)


# ---- deliveries started by the consumer (scheduler.consumer_recording): the task's side


def call_started_early(task, early, *args):
    task.push_request(chrono_execution_id=early.request.execution_id,
                      chrono_tenant_id="00000000-0000-4000-8000-0000000000aa",
                      chrono_attempt="1", hostname="w@test", args=args, kwargs={},
                      early_start=early)
    try:
        return task(*args)
    finally:
        task.pop_request()


def early_request(at_ms: int = 1_700_000_000_123) -> StartRequest:
    return StartRequest("00000000-0000-4000-8000-000000000002", 1, "w@test", 60_000, at_ms)


def refused_grants(*args):
    raise AssertionError("the grant was checked when the delivery arrived")


def test_a_delivery_started_as_it_arrived_runs_its_body_with_no_start_of_its_own(monkeypatch):
    starts = Failing(failures=0, result=started)
    finishes: list = []
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    monkeypatch.setattr(worker, "_finishes", Coalescer(
        lambda items: finishes.extend(items) or [True] * len(items)))
    monkeypatch.setattr(worker.grants, "refusal", refused_grants)
    request = early_request()
    assert call_started_early(recorded, EarlyStart(request, started(request)), 11) == 11
    assert (RAN, starts.calls) == ([11], 0)
    assert [f.started.execution_id for f in finishes] == [request.execution_id]


def test_a_delivery_found_not_startable_as_it_arrived_runs_nothing(monkeypatch):
    starts = Failing(failures=0, result=started)
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    assert call_started_early(recorded, EarlyStart(early_request(), None), 12) is None
    assert (RAN, starts.calls) == ([], 0)


def test_a_start_whose_statement_failed_on_arrival_is_tried_again_with_the_same_request(
        monkeypatch):
    seen: list[StartRequest] = []

    def start(items):
        seen.extend(items)
        return [started(item) for item in items]
    monkeypatch.setattr(worker, "_starts", Coalescer(start))
    monkeypatch.setattr(worker, "_finishes", Coalescer(Failing(0, lambda item: True)))
    request = early_request()
    assert call_started_early(recorded, EarlyStart(request, None, failed=True), 13) == 13
    # The same start time: a start the failed statement committed is found to be this
    # delivery's (scheduler.executions.started_by).
    assert seen == [request] and RAN == [13]


def test_a_success_goes_to_the_consumer_unless_it_is_closing(monkeypatch):
    handed: list = []
    finishes: list = []
    monkeypatch.setattr(worker, "_finishes", Coalescer(
        lambda items: finishes.extend(items) or [True] * len(items)))
    request = early_request()
    taking = EarlyStart(request, started(request), finish_later=lambda f: handed.append(f) or True)
    assert call_started_early(recorded, taking, 14) == 14
    assert [f.started.execution_id for f in handed] == [request.execution_id] and finishes == []

    closing = EarlyStart(request, started(request), finish_later=lambda f: False)
    assert call_started_early(recorded, closing, 15) == 15
    assert [f.started.execution_id for f in finishes] == [request.execution_id]


def test_a_prefork_childs_own_start_then_its_success_goes_to_its_parent(monkeypatch):
    """A small prefork pool's child (its parent makes no starts): the task makes its start
    and sends its success through the channel; with no channel, or one that cannot take it,
    the task records it."""
    starts = Failing(failures=0, result=started)
    finishes: list = []
    sent: list = []
    monkeypatch.setattr(worker, "_starts", Coalescer(starts))
    monkeypatch.setattr(worker, "_finishes", Coalescer(
        lambda items: finishes.extend(items) or [True] * len(items)))
    monkeypatch.setattr(worker, "send_success", lambda f: sent.append(f) or True)
    assert call_as_chrono(recorded, 16) == 16
    assert starts.calls == 1 and finishes == []
    assert [(f.started.execution_id, f.status, f.result) for f in sent] == [
        ("00000000-0000-4000-8000-000000000001", "SUCCEEDED", 16)]

    monkeypatch.setattr(worker, "send_success", lambda f: False)
    assert call_as_chrono(recorded, 17) == 17
    assert [f.result for f in finishes] == [17]
