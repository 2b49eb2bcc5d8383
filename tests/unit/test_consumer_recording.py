"""A thread pool's recording made by its consumer (scheduler.consumer_recording): deliveries held
in arrival order until the loop's tick, as many taken as threads are idle, started together,
handed to the pool in order, every one of them, whatever happened to the statement; successes
recorded together on the next turn, tried again with the tasks' patience, and recorded at the
worker's stop."""

from __future__ import annotations

import os
import pickle
import time
from concurrent.futures import Future

import pytest
from django.db import OperationalError

from scheduler import consumer_recording
from scheduler.clock import ms_to_datetime
from scheduler.consumer_recording import EARLY_START, ConsumerRecording, EarlyStart
from scheduler.executions import FinishRequest
from scheduler.lifecycle import StartedExecution

TENANT = "00000000-0000-4000-8000-0000000000aa"


class Result:
    def __init__(self) -> None:
        self.f: Future = Future()


class Pool:
    """A thread pool's face as Celery's consumer sees it: ``limit`` and ``on_apply``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.applied: list[tuple[object, dict]] = []
        self.refuse: set[str] = set()

    def on_apply(self, target, args=None, kwargs=None, **options):
        if args[1] in self.refuse:
            raise RuntimeError("cannot schedule new futures after shutdown")
        result = Result()
        self.applied.append((args, options, result))
        return result


class Starts:
    def __init__(self, *, fail_with: BaseException | None = None, startable=lambda r: True):
        self.statements: list[list] = []
        self.fail_with = fail_with
        self.startable = startable

    def __call__(self, requests):
        self.statements.append(list(requests))
        if self.fail_with is not None:
            raise self.fail_with
        return [StartedExecution(r.execution_id, 7, r.attempt) if self.startable(r) else None
                for r in requests]


class Loop:
    """A kombu hub's turn (its ticks), then the recorder's turn when it was woken: the recorder
    thread's wait and flush, run here in order."""

    def __init__(self) -> None:
        self.on_tick: set = set()
        self.recording: ConsumerRecording | None = None

    def turn(self) -> None:
        for tick in list(self.on_tick):
            tick()
        if self.recording._flush_due:
            self.recording.flush()


def chrono(task_id: str, **headers) -> tuple:
    request = {"chrono_execution_id": f"exec-{task_id}", "chrono_tenant_id": TENANT,
               "chrono_attempt": "2", "chrono_fire_ms": "1700000000000", "hostname": "w@h",
               "delivery_info": {"routing_key": "q1"}, **headers}
    return ("chrono.noop", task_id, request, b"[]", "application/json", "utf-8")


def plain(task_id: str) -> tuple:
    return ("app.plain", task_id, {"hostname": "w@h"}, b"[]", "application/json", "utf-8")


@pytest.fixture
def granted(monkeypatch):
    asked: list[tuple] = []

    def refusal(tenant_id, task_name, queue):
        asked.append((tenant_id, task_name, queue))
        return "not granted" if task_name == "chrono.refused" else None
    monkeypatch.setattr(consumer_recording.grants, "refusal", refusal)
    return asked


def deliver(starts: ConsumerRecording, *deliveries: tuple) -> None:
    for args in deliveries:
        starts.on_apply(object(), args, {}, callback=lambda ret: None)


class Finishes:
    def __init__(self, *, fail_with: BaseException | None = None, failures: int = 0,
                 refuse: frozenset = frozenset()):
        self.statements: list[list] = []
        self.fail_with = fail_with
        self.failures = failures
        self.refuse = refuse

    def __call__(self, requests):
        self.statements.append([r.started.execution_id for r in requests])
        if self.fail_with is not None and len(self.statements) <= self.failures:
            raise self.fail_with
        return [r.started.execution_id not in self.refuse for r in requests]


def made(pool: Pool, limit_starts: Starts | None = None, loop: Loop | None = None,
         finishes: Finishes | None = None):
    loop = loop or Loop()
    starts = ConsumerRecording(pool, start=limit_starts or Starts(),
                               finish=finishes or Finishes(), loop=loop, lease_ttl_ms=60_000,
                               default_queue="celery", attempts=3, outage_s=30.0,
                               recorder=False).install()
    loop.recording = starts
    return starts, loop


def test_deliveries_wait_for_the_end_of_the_turn_then_start_in_one_statement_in_order(granted):
    pool, statement = Pool(limit=8), Starts()
    starts, loop = made(pool, statement)
    assert pool.on_apply == starts.on_apply
    deliver(starts, chrono("a"), plain("p"), chrono("b"))
    assert pool.applied == []  # until the loop's tick, which comes before it waits again

    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "p", "b"]
    assert len(statement.statements) == 1
    request = statement.statements[0][0]
    assert (request.execution_id, request.attempt, request.worker_id, request.lease_ttl_ms) == (
        "exec-a", 2, "w@h", 60_000)
    assert request.scheduled_for == ms_to_datetime(1_700_000_000_000)
    early = pool.applied[0][0][2][EARLY_START]
    assert isinstance(early, EarlyStart) and early.request == request and not early.failed
    assert early.started.fencing_token == 7
    assert EARLY_START not in pool.applied[1][0][2]
    assert granted == [(TENANT, "chrono.noop", "q1"), (TENANT, "chrono.noop", "q1")]
    assert starts.early == 2


def test_a_delivery_that_may_not_start_carries_that_answer(granted):
    pool = Pool(limit=8)
    starts, loop = made(pool, Starts(startable=lambda r: r.execution_id != "exec-dup"))
    deliver(starts, chrono("dup"))
    loop.turn()
    early = pool.applied[0][0][2][EARLY_START]
    assert early.started is None and not early.failed


def test_deliveries_wait_for_idle_threads_and_a_task_that_ends_hands_on_the_next(granted):
    pool, statement = Pool(limit=3), Starts()
    starts, loop = made(pool, statement)
    deliver(starts, chrono("a"), plain("p"), chrono("b"), chrono("c"), chrono("d"))
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "p", "b"]
    assert [len(s) for s in statement.statements] == [2]
    loop.turn()
    assert len(pool.applied) == 3  # nothing more until a thread is idle

    # "a" succeeds: its thread counts as idle from its success callback on (the task has
    # returned), which wakes the loop once, however many end before its turn.
    _, options_a, _ = pool.applied[0]
    options_a["callback"]("result")
    pool.applied[0][2].f.set_result(None)  # the future of "a" ends too: counted once
    pool.applied[1][2].f.set_exception(RuntimeError("WorkerLostError"))  # "p" ended otherwise
    assert starts._flush_due  # the recorder is woken
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "p", "b", "c", "d"]
    assert [len(s) for s in statement.statements] == [2, 2]  # the two freed threads' share one
    assert all(EARLY_START in args[2] for args, _, _ in pool.applied if args[1] != "p")
    assert starts.early == 4

    deliver(starts, chrono("e"))
    loop.turn()
    assert len(pool.applied) == 5  # "b", "c" and "d" hold the threads
    pool.applied[2][2].f.set_result(None)
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied][-1] == "e"


def test_a_refused_or_tenantless_delivery_is_left_to_its_task(granted):
    pool = Pool(limit=8)
    starts, loop = made(pool)
    refused = ("chrono.refused",) + chrono("r")[1:]
    deliver(starts, refused, chrono("n", chrono_tenant_id=""), chrono("ok"))
    loop.turn()
    assert [EARLY_START in args[2] for args, _, _ in pool.applied] == [False, False, True]


def test_a_failed_statement_hands_each_delivery_its_request_and_pauses_early_starts(
        granted, monkeypatch):
    pool, statement = Pool(limit=8), Starts(fail_with=OperationalError("server closed"))
    starts, loop = made(pool, statement)
    clock = [100.0]
    monkeypatch.setattr(consumer_recording.time, "monotonic", lambda: clock[0])
    deliver(starts, chrono("a"), chrono("b"))
    loop.turn()
    assert len(pool.applied) == 2
    for (args, _, _), request in zip(pool.applied, statement.statements[0], strict=True):
        early = args[2][EARLY_START]
        assert (early.request, early.started, early.failed) == (request, None, True)
        assert early.finish_later == starts.finish_later  # its success still goes by the recorder

    statement.fail_with = None
    clock[0] += consumer_recording.PAUSE_AFTER_ERROR_S - 1
    deliver(starts, chrono("c"))
    loop.turn()
    assert len(statement.statements) == 1 and EARLY_START not in pool.applied[2][0][2]

    clock[0] += 2
    deliver(starts, chrono("d"))
    loop.turn()
    assert len(statement.statements) == 2 and EARLY_START in pool.applied[3][0][2]


def test_whatever_fails_every_delivery_reaches_the_pool(granted):
    pool = Pool(limit=8)
    starts, loop = made(pool, Starts(fail_with=ValueError("a bug")))
    pool.refuse = {"b"}
    deliver(starts, chrono("a"), chrono("b"), plain("c"))
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "c"]
    assert not any(EARLY_START in args[2] for args, _, _ in pool.applied)
    assert starts._busy == 2  # the refused delivery holds no thread


def success(execution_id: str) -> FinishRequest:
    return FinishRequest(StartedExecution(execution_id, 7, 1), "SUCCEEDED", result=1)


def ran(pool: Pool, index: int, execution_id: str) -> None:
    """The task of the ``index``-th delivery handed over returns after its body, handing its
    success to the consumer, as ChronoTask does, then its thread is idle."""
    args, options, result = pool.applied[index]
    assert args[2][EARLY_START].finish_later(success(execution_id))
    options["callback"]("result")
    result.f.set_result(None)


def test_successes_handed_over_are_recorded_together_on_the_next_turn(granted, monkeypatch,
                                                                      caplog):
    monkeypatch.setattr(consumer_recording, "refusal_reason", lambda started: "its lease was lost")
    pool, finishes = Pool(limit=2), Finishes(refuse=frozenset({"e2"}))
    recording, loop = made(pool, finishes=finishes)
    deliver(recording, chrono("a"), chrono("b"), chrono("c"))
    loop.turn()
    ran(pool, 0, "e1")
    ran(pool, 1, "e2")
    assert finishes.statements == [] and recording._flush_due  # the recorder is woken
    loop.turn()
    assert finishes.statements == [["e1", "e2"]]
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b", "c"]
    assert "result of e2 not recorded: its lease was lost" in caplog.text


def test_a_failed_success_statement_is_tried_again_later_then_given_up(granted, monkeypatch):
    lost = OperationalError("server closed the connection unexpectedly")
    monkeypatch.setattr(consumer_recording, "connection_lost", lambda exc: exc is lost)
    clock = [100.0]
    monkeypatch.setattr(consumer_recording.time, "monotonic", lambda: clock[0])
    pool = Pool(limit=2)
    finishes = Finishes(fail_with=lost, failures=10**9)
    recording, loop = made(pool, finishes=finishes)
    deliver(recording, chrono("a"))
    loop.turn()
    ran(pool, 0, "e1")
    loop.turn()
    assert len(finishes.statements) == 1 and recording._retry_at > clock[0]
    recording.flush()
    assert len(finishes.statements) == 1, "tried again before its pause"
    clock[0] += 29
    recording.flush()
    assert len(finishes.statements) == 2 and recording._successes  # still within the outage
    clock[0] += 2
    recording.flush()
    assert len(finishes.statements) == 3 and not recording._successes  # given up


def test_a_refused_statement_gets_the_tasks_attempts(granted):
    pool = Pool(limit=2)
    finishes = Finishes(fail_with=OperationalError("deadlock detected"), failures=2)
    recording, loop = made(pool, finishes=finishes)
    deliver(recording, chrono("a"))
    loop.turn()
    ran(pool, 0, "e1")
    loop.turn()
    for _ in range(2):
        recording._retry_at = 0.0
        recording.flush()
    assert finishes.statements == [["e1"]] * 3 and not recording._successes


def test_from_a_shutdown_on_the_tasks_record_their_own_and_close_records_the_rest(granted):
    pool, finishes = Pool(limit=2), Finishes(fail_with=OperationalError("deadlock"), failures=1)
    recording, loop = made(pool, finishes=finishes)
    deliver(recording, chrono("a"), chrono("b"))
    loop.turn()
    ran(pool, 0, "e1")  # handed over; the loop stops before its turn
    recording.closing()
    assert pool.applied[1][0][2][EARLY_START].finish_later(success("e2")) is False
    slept: list[float] = []
    recording.close(sleep=slept.append)
    assert finishes.statements == [["e1"], ["e1"]] and len(slept) == 2


def test_the_recorder_thread_works_when_woken_and_stops_at_close(granted):
    pool, finishes = Pool(limit=2), Finishes()
    loop = Loop()
    recording = ConsumerRecording(pool, start=Starts(), finish=finishes, loop=loop,
                                  lease_ttl_ms=60_000, default_queue="celery", attempts=3,
                                  outage_s=0.5).install()
    deliver(recording, chrono("a"))
    for tick in loop.on_tick:
        tick()
    deadline = time.monotonic() + 5
    while not pool.applied and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [args[1] for args, _, _ in pool.applied] == ["a"]
    ran(pool, 0, "e1")
    while not finishes.statements and time.monotonic() < deadline:
        time.sleep(0.01)
    assert finishes.statements == [["e1"]]
    recording.close()
    assert not recording._recorder.is_alive()


# A prefork pool: its children send their successes through a SuccessChannel, and what the
# recorder takes is handed to the pool in the consumer's loop.

class PreforkLoop(Loop):
    """A kombu hub whose ``call_soon`` (thread-safe) runs its callbacks on its next turn."""

    def __init__(self) -> None:
        super().__init__()
        self.soon: list = []

    def call_soon(self, callback) -> None:
        self.soon.append(callback)

    def turn(self) -> None:
        super().turn()
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class Job:
    """billiard's ApplyResult: no future; ``discard`` drops it from the pool's cache;
    ``_write_to`` is the child it is being written to, once its writing began."""

    def __init__(self) -> None:
        self.discarded = False
        self._write_to = None

    def discard(self) -> None:
        self.discarded = True


class PreforkPool(Pool):
    """The consumer calls ``callback`` when a child's result comes back, ``error_callback``
    when the child died; ``flush`` (a lost broker connection) discards the jobs no child has
    taken yet, calling neither."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.jobs: list[Job] = []
        self.flushed = 0

    def on_apply(self, target, args=None, kwargs=None, **options):
        super().on_apply(target, args, kwargs, **options)
        self.jobs.append(Job())
        return self.jobs[-1]

    def flush(self) -> None:
        self.flushed += 1


@pytest.fixture
def channel():
    made_channel = consumer_recording.open_success_channel()
    yield made_channel
    consumer_recording.close_success_channel()


def prefork(pool: Pool, channel, finishes: Finishes | None = None, starts: Starts | None = None):
    loop = PreforkLoop()
    recording = ConsumerRecording(pool, start=starts or Starts(), finish=finishes or Finishes(),
                                  loop=loop, lease_ttl_ms=60_000, default_queue="celery",
                                  attempts=3, outage_s=30.0, recorder=False,
                                  channel=channel).install()
    loop.recording = recording
    return recording, loop


def in_a_child(work) -> int:
    """Run ``work`` in a forked process, as a pool child runs its task; its exit status."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if work() else 3
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_prefork_childs_success_reaches_the_recorder_in_its_parent(channel):
    finish = FinishRequest(StartedExecution("e1", 7, 1, ms_to_datetime(1_700_000_000_000)),
                           "SUCCEEDED", result={"rows": [1, 2]}, exit_code=0, at_ms=5)
    assert in_a_child(lambda: consumer_recording.send_success(finish)) == 0
    assert channel.receive() == [finish]
    assert channel.receive() == []


def test_a_success_the_channel_cannot_carry_is_left_to_the_task(channel):
    started = StartedExecution("e1", 7, 1)
    too_large = FinishRequest(started, "SUCCEEDED", result="x" * channel.MAX_BYTES)
    unpicklable = FinishRequest(started, "SUCCEEDED", result=lambda: None)
    assert consumer_recording.send_success(too_large) is False
    assert consumer_recording.send_success(unpicklable) is False
    assert channel.receive() == []
    channel.receiver.close()  # the parent is gone
    assert consumer_recording.send_success(success("e2")) is False


def test_without_a_channel_a_child_records_its_own_success():
    assert consumer_recording.success_channel() is None
    assert consumer_recording.send_success(success("e1")) is False


def test_a_prefork_pool_gets_its_deliveries_in_the_consumers_loop_with_their_start(
        granted, channel):
    pool, statement = PreforkPool(limit=2), Starts()
    recording, loop = prefork(pool, channel, starts=statement)
    deliver(recording, chrono("a"), chrono("b"), chrono("c"))
    for tick in loop.on_tick:
        tick()
    recording.flush()  # the recorder's turn, in its thread
    assert pool.applied == [] and len(loop.soon) == 1  # handed over in the loop, not here
    assert recording._busy == 2  # the two children are taken already
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b"]
    assert len(statement.statements) == 1
    early = pool.applied[0][0][2][EARLY_START]
    # Pickled into the child with its request: its success goes back by the channel.
    assert early.finish_later is consumer_recording.send_success
    assert pickle.loads(pickle.dumps(early)) == early


def test_a_small_prefork_pools_deliveries_go_to_it_and_what_its_children_send_is_recorded(
        granted, channel):
    """hold=False (fewer than MIN_PREFORK_CHILDREN children, which make their own starts):
    the pool's on_apply is left alone, and the recorder thread records each success as the
    channel brings it, with no wake-up from the consumer."""
    pool, finishes, loop = PreforkPool(limit=2), Finishes(), PreforkLoop()
    recording = ConsumerRecording(pool, start=Starts(), finish=finishes, loop=loop,
                                  lease_ttl_ms=60_000, default_queue="celery", attempts=3,
                                  outage_s=0.5, channel=channel, hold=False).install()
    try:
        # Neither the pool's on_apply nor its flush replaced, no tick added to the loop.
        assert "on_apply" not in vars(pool) and "flush" not in vars(pool) and not loop.on_tick
        assert in_a_child(lambda: consumer_recording.send_success(success("e-1"))) == 0
        deadline = time.monotonic() + 5
        while not finishes.statements and time.monotonic() < deadline:
            time.sleep(0.01)
        assert finishes.statements == [["e-1"]]
        assert in_a_child(lambda: consumer_recording.send_success(success("e-2"))) == 0
    finally:
        recording.close()
    # Sent before the close: recorded by the recorder's turn or by the close.
    assert sorted(sum(finishes.statements, [])) == ["e-1", "e-2"]
    assert not recording._recorder.is_alive()


def test_a_prefork_childs_success_and_death_free_its_place_and_successes_are_recorded(
        granted, channel):
    pool, finishes = PreforkPool(limit=2), Finishes()
    recording, loop = prefork(pool, channel, finishes=finishes)
    deliver(recording, chrono("a"), chrono("b"), chrono("c"), chrono("d"))
    loop.turn()
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b"]

    # "a" succeeds: the child sends its success, then its result reaches the consumer.
    args_a, options_a, _ = pool.applied[0]
    assert in_a_child(lambda: args_a[2][EARLY_START].finish_later(success("e-a"))) == 0
    options_a["callback"]("result")
    # "b"'s child is killed: billiard calls the error callback.
    pool.applied[1][1]["error_callback"](RuntimeError("WorkerLostError"))
    assert recording._flush_due
    loop.turn()
    loop.turn()
    assert finishes.statements == [["e-a"]]
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b", "c", "d"]
    assert recording._busy == 2


def test_a_prefork_pools_last_successes_are_recorded_at_close(granted, channel):
    pool, finishes = PreforkPool(limit=2), Finishes()
    recording, loop = prefork(pool, channel, finishes=finishes)
    deliver(recording, chrono("a"))
    loop.turn()
    loop.turn()
    early = pool.applied[0][0][2][EARLY_START]
    assert in_a_child(lambda: early.finish_later(success("e-a"))) == 0
    recording.close(sleep=lambda s: None)  # the pool joined before the worker's shutdown
    assert finishes.statements == [["e-a"]]


def test_a_lost_broker_connection_drops_the_held_deliveries_and_frees_the_discarded_jobs(
        granted, channel):
    pool, statement = PreforkPool(limit=3), Starts()
    recording, loop = prefork(pool, channel, starts=statement)
    deliver(recording, *(chrono(name) for name in "abcde"))
    loop.turn()
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b", "c"]

    # Celery's consumer lost its connection: it flushes the pool, which discards the jobs no
    # child acknowledged: "b", being written to a child (it runs there), and "c", still in the
    # pool's buffer (it never runs); "d" and "e" were never started, and their messages, like
    # those of "b" and "c", come again.
    pool.flush()
    assert pool.flushed == 1 and not recording._held
    pool.jobs[1]._write_to = "child 2"
    pool.jobs[1].discard()
    pool.jobs[2].discard()
    assert pool.jobs[1].discarded and pool.jobs[2].discarded and recording._busy == 1

    # Delivered again: "c" runs on the start made for it (a new start would be refused, its
    # run RUNNING); "b" is started anew, which the database refuses while its run holds.
    deliver(recording, chrono("b"), chrono("c"))
    loop.turn()
    loop.turn()
    assert [args[1] for args, _, _ in pool.applied] == ["a", "b", "c", "b", "c"]
    assert pool.applied[4][0][2][EARLY_START] == pool.applied[2][0][2][EARLY_START]
    assert [[r.execution_id for r in s] for s in statement.statements] == [
        ["exec-a", "exec-b", "exec-c"], ["exec-b"]]


def test_a_start_dropped_unrun_is_not_reused_once_its_lease_may_have_expired(
        granted, channel, monkeypatch):
    clock = [1_700_000_000_000]
    monkeypatch.setattr(consumer_recording, "now_ms", lambda: clock[0])
    pool, statement = PreforkPool(limit=1), Starts()
    recording, loop = prefork(pool, channel, starts=statement)
    deliver(recording, chrono("a"))
    loop.turn()
    loop.turn()
    pool.flush()
    pool.jobs[0].discard()
    clock[0] += 30_001  # past half the lease (60 s): the reaper may be sending it again
    deliver(recording, chrono("a"))
    loop.turn()
    loop.turn()
    assert len(statement.statements) == 2  # a new start, which the database decides
