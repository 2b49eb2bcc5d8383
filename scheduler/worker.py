"""Chrono's side of a Celery worker: the task base class that records every Chrono execution.

A message published by Chrono carries ``chrono_execution_id`` and ``chrono_attempt`` headers. The
task starts the execution with a conditional update before running the body; a delivery that may
not start (a duplicate, a cancelled execution, a stale attempt) returns without running anything.
In a thread or prefork pool a recorder thread beside the worker's consumer records the starts
(as idle threads or children take the deliveries) and the successes, one statement of each a
turn (:mod:`scheduler.consumer_recording`); in a solo pool, and for what the recorder leaves to
the task, the task records them, the concurrent tasks of a thread pool sharing statements
(:mod:`scheduler.batching`).
While the body runs, the process's lease keeper renews the execution's lease. A failure goes to
the job's retry policy (``chrono_retry_policy`` header): another attempt after a backoff, or the
end (dead-lettered). Calls without the headers (``task.delay()``, a plain Celery message) run as
ordinary Celery tasks.

Defence in depth: a Chrono message whose tenant (``chrono_tenant_id``) was not granted its task
on the queue it came from ends FAILED with the reason, its body never run, however it reached
the queue (a grant revoked after it was published, a message published by hand). The check is
the per-process cached look-up of :mod:`chronocore.grants` (a dictionary look-up).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from celery import Task
from celery.exceptions import Reject, SoftTimeLimitExceeded
from celery.signals import task_unknown
from django.db import DatabaseError, connection

from chronocore import grants
from chronocore.config import ChronoConfig, get_config
from chronocore.database import connection_lost
from scheduler import log_capture, metrics, rollups
from scheduler.attempts import (
    end_attempt,
    fail_ungranted_task,
    fail_unregistered_task,
    next_attempt_message,
    send_attempt,
)
from scheduler.batching import Coalescer
from scheduler.cancellation import finish_cancelled
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.consumer_recording import (
    EARLY_START,
    ConsumerRecording,
    EarlyStart,
    SuccessChannel,
    fire_ms_of,
    send_success,
    start_request,
)
from scheduler.dispatch import DispatchError, Publisher, TaskMessage
from scheduler.executions import (
    FinishRequest,
    StartRequest,
    finish_executions,
    refusal_reason,
    start_executions,
    started_by,
)
from scheduler.failures import failure_error, failure_traceback
from scheduler.leases import lease_keeper
from scheduler.lifecycle import StartedExecution
from scheduler.models import ExecutionStatus
from scheduler.prepared import GENERIC_PLAN_MAX_ROWS, OwnConnection
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store

log = logging.getLogger("chrono.worker")
T = TypeVar("T")
RECORD_ATTEMPTS = 3
# A PostgreSQL failover (the primary lost, its standby promoted) takes seconds: a start or finish
# whose connection broke is tried again for this long, so that a run that succeeded is recorded
# as such rather than left RUNNING for the reaper to call lost (and run again). Below the default
# execution lease (60 s); past a shorter lease the fencing check refuses the late write.
RECORD_OUTAGE_S = 30.0
RECORD_MAX_PAUSE_S = 1.0


# Starts and finishes of a process's concurrent tasks (a thread pool) share statements, each
# kind on a connection of its own (whichever thread leads a batch runs it there). A batch of a
# few rows runs on a second connection of its kind, where prepared statements keep a generic
# plan (scheduler.prepared.GENERIC_PLANS); one row, and a batch too large to be prepared, on
# the first.
_start_connection = OwnConnection()
_finish_connection = OwnConnection()
_start_batch_connection = OwnConnection(generic_plans=True)
_finish_batch_connection = OwnConnection(generic_plans=True)


def _on_connection_for_size(record: Callable[..., list[T]], one: OwnConnection,
                            batch: OwnConnection) -> Callable[[Sequence[object]], list[T]]:
    def run(items: Sequence[object]) -> list[T]:
        few = 1 < len(items) <= GENERIC_PLAN_MAX_ROWS
        return record(items, on=batch if few else one)
    return run


# A thread pool's recorder thread records starts and successes (scheduler.consumer_recording), on
# connections of its own.
_consumer_start_connection = OwnConnection()
_consumer_start_batch_connection = OwnConnection(generic_plans=True)
_consumer_finish_connection = OwnConnection()
_consumer_finish_batch_connection = OwnConnection(generic_plans=True)
_consumer_recording: list[ConsumerRecording] = []
_starts = Coalescer(_on_connection_for_size(start_executions, _start_connection,
                                            _start_batch_connection))
_finishes = Coalescer(_on_connection_for_size(finish_executions, _finish_connection,
                                              _finish_batch_connection))


def connect_recording(*, batches: bool = False) -> None:
    """Open the recording connections before the first job rather than while it waits;
    ``batches``: those of batched statements too (a thread pool's: a prefork or solo process
    runs one task at a time, and never opens them)."""
    _start_connection.connect()
    _finish_connection.connect()
    if batches:
        _start_batch_connection.connect()
        _finish_batch_connection.connect()


def record_in_consumer(pool: object, hub: object,
                       channel: SuccessChannel | None = None) -> ConsumerRecording:
    """Record a pool's starts and successes beside the worker's consumer
    (:mod:`scheduler.consumer_recording`); ``hub``: the consumer's event loop; ``channel``: a
    prefork pool's, which its children send their successes through (only those, when its
    ``starts`` is False)."""
    hold = channel is None or channel.starts
    connections = ((_consumer_start_connection, _consumer_start_batch_connection)
                   if hold else ()) + (_consumer_finish_connection,
                                       _consumer_finish_batch_connection)
    for own in connections:
        own.connect()
    settings = runtime()
    recording = ConsumerRecording(
        pool,
        start=_on_connection_for_size(start_executions, _consumer_start_connection,
                                      _consumer_start_batch_connection),
        finish=_on_connection_for_size(finish_executions, _consumer_finish_connection,
                                       _consumer_finish_batch_connection),
        loop=hub,
        lease_ttl_ms=settings.lease_ttl_ms,
        default_queue=settings.default_queue,
        attempts=RECORD_ATTEMPTS,
        outage_s=RECORD_OUTAGE_S,
        channel=channel,
        hold=hold,
    ).install()
    _consumer_recording.append(recording)
    return recording


def consumer_recording_closing() -> None:
    """A warm shutdown began: tasks record their own successes from now on."""
    for recording in _consumer_recording:
        recording.closing()


def close_consumer_recording() -> None:
    """Record the successes the consumer still holds (the pool's tasks are done)."""
    while _consumer_recording:
        _consumer_recording.pop().close()


def warm_threads(pool: object, timeout_s: float = 10.0) -> int:
    """Start every thread of a Celery thread pool now (its executor starts one a task, on the
    first ``limit`` tasks: a burst's first jobs otherwise waited on their creation); how many
    ran. Each warm-up call waits for the others, so that each holds a thread of its own."""
    executor = getattr(pool, "executor", None)
    limit = int(getattr(pool, "limit", 0) or 0)
    if executor is None or limit < 1:
        return 0
    barrier = threading.Barrier(limit + 1)

    def hold() -> None:
        try:
            barrier.wait(timeout_s)
        except threading.BrokenBarrierError:
            pass

    futures = [executor.submit(hold) for _ in range(limit)]
    try:
        barrier.wait(timeout_s)
    except threading.BrokenBarrierError:
        log.warning("thread pool warm-up: not every thread started within %.0f s", timeout_s)
    return sum(1 for future in futures if future.result(timeout_s) is None)


def _retrying(record: Callable[[], T]) -> T:
    """Run a recording statement, again after a short pause when PostgreSQL failed it (a
    deadlock victim: ``RECORD_ATTEMPTS`` tries); while the server cannot be reached
    (:func:`chronocore.database.connection_lost`: the connection broke, the primary is being
    replaced), again with back-off for up to ``RECORD_OUTAGE_S``. The last failure is raised."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return record()
        except DatabaseError as exc:
            if connection_lost(exc):
                if time.monotonic() - started >= RECORD_OUTAGE_S:
                    raise
                log.warning("recording failed (attempt %d, PostgreSQL unreachable for %.1f s), "
                            "again: %r", attempt, time.monotonic() - started, exc)
            elif attempt >= RECORD_ATTEMPTS:
                raise
            else:
                log.warning("recording failed (attempt %d of %d), again: %r", attempt,
                            RECORD_ATTEMPTS, exc)
        connection.close_if_unusable_or_obsolete()
        time.sleep(min(0.05 * 2 ** min(attempt, 5), RECORD_MAX_PAUSE_S))


def fire_ms_header(request: object) -> int | None:
    """The fire time a Chrono message carries (``chrono_fire_ms``): its execution's
    ``scheduled_for``, the partition key of every statement the worker runs for it; None when
    the message has none (published by hand)."""
    return fire_ms_of(getattr(request, "chrono_fire_ms", None))


class WorkerRuntime:
    """What Chrono's side of one worker process runs with, built from its configuration: the
    settings a task reads and the publisher of next attempts (made on first use, after the pool
    forked: a connection does not survive a fork; nor does the lease keeper's thread, which
    :func:`scheduler.leases.lease_keeper` starts with this configuration)."""

    def __init__(self, config: ChronoConfig) -> None:
        self.config = config
        self.lease_ttl_ms = config.execution_lease_ttl_ms
        self.default_queue = config.default_queue
        self._publisher: Publisher | None = None

    def publisher(self) -> Publisher:
        if self._publisher is None:
            self._publisher = Publisher(self.config.broker_url, origin="chrono-worker")
        return self._publisher


_runtime: WorkerRuntime | None = None


def runtime() -> WorkerRuntime:
    """This process's :class:`WorkerRuntime`."""
    global _runtime
    if _runtime is None:
        # The process edge: Celery builds ChronoTask itself, in the workers of any app that
        # uses it, so nothing owns the integration to hand it a configuration; the process's
        # is read here, once, and everything the integration builds is given it.
        _runtime = WorkerRuntime(get_config())
    return _runtime


class ChronoTask(Task):
    """Base class of every task in Chrono's Celery app (``task_cls``)."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        execution_id = getattr(self.request, "chrono_execution_id", None)
        if not execution_id:
            return super().__call__(*args, **kwargs)
        settings = runtime()
        early: EarlyStart | None = getattr(self.request, EARLY_START, None)
        if early is None:
            begun = self._begin(execution_id, settings)
            if begun is None:
                return None
            request, started = begun
        elif early.failed:
            # The recorder's statement failed (scheduler.consumer_recording): the same request
            # again, so that a start it committed is found to be this delivery's.
            request = early.request
            started = self._start(request)
        else:
            request, started = early.request, early.started
        if started is None:
            log.info("execution %s not startable (duplicate or cancelled): skipped", execution_id)
            metrics.count_outcome("not_startable")
            return None
        header_fire_ms = fire_ms_header(self.request)
        counted = rollups.recorder()
        tenant_id = str(getattr(self.request, "chrono_tenant_id", "") or rollups.ALL_TENANTS)
        fire_ms = request.at_ms if header_fire_ms is None else header_fire_ms
        counted.note_started(request.at_ms, tenant_id, self.name, request.at_ms - fire_ms)
        if request.attempt == 1:
            metrics.observe_start_lateness(request.at_ms - fire_ms)
        keeper = lease_keeper(settings.config)
        keeper.hold(execution_id, started.fencing_token, started.scheduled_for)
        try:
            result = self._run_body(request, tenant_id, args, kwargs)
        except Exception as exc:
            keeper.release(execution_id)
            failed_ms = now_ms()
            counted.note_finished(failed_ms, tenant_id, self.name, succeeded=False,
                                  duration_ms=failed_ms - request.at_ms)
            metrics.count_outcome(self._after_failure(started, exc, settings))
            raise
        keeper.release(execution_id)
        finish = FinishRequest(started, ExecutionStatus.SUCCEEDED, result=result, exit_code=0,
                               at_ms=now_ms())
        counted.note_finished(finish.at_ms, tenant_id, self.name, succeeded=True,
                              duration_ms=finish.at_ms - request.at_ms)
        # Recorded by the consumer's recorder on its next turn: handed over in this process
        # (a thread pool's), or sent to the worker's process (a prefork child, whichever made
        # its start); False when it cannot take it, and the task records it.
        finish_later = send_success if early is None else early.finish_later
        if finish_later is not None and finish_later(finish):
            return result
        try:
            recorded = _retrying(lambda: _finishes.submit(finish))
        except DatabaseError as exc:
            # The run stays RUNNING until its lease expires; the reaper then applies the
            # retry policy (at least once: it may run again).
            log.error("could not record the success of %s: %r", execution_id, exc)
            metrics.count_outcome("unrecorded")
            return result
        if not recorded:
            log.warning("result of %s not recorded: %s", execution_id, refusal_reason(started))
        metrics.count_outcome("succeeded" if recorded else "refused")
        return result

    def _begin(self, execution_id: str, settings: WorkerRuntime
               ) -> tuple[StartRequest, StartedExecution | None] | None:
        """This delivery's start, made by its task: its grant checked, then the start; None
        when it was refused (recorded) instead."""
        try:
            # The grants are read from PostgreSQL when the process's cache of them is stale: an
            # error here escaped as the task's, and the message was acknowledged unrun.
            refused = _retrying(lambda: self._grant_refusal(settings))
        except DatabaseError as exc:
            log.error("could not read the task grants of execution %s, message requeued: %r",
                      execution_id, exc)
            metrics.count_outcome("requeued")
            raise Reject(exc, requeue=True) from exc
        if refused is not None:
            self._refuse(execution_id, refused)
            return None
        request = start_request(vars(self.request), settings.lease_ttl_ms, now_ms())
        return request, self._start(request)

    def _start(self, request: StartRequest) -> StartedExecution | None:
        """Start ``request``'s execution; None when this delivery may not run it."""
        metrics.count_starts("task")
        try:
            started = _retrying(lambda: _starts.submit(request))
        except DatabaseError as exc:
            # Nothing ran: the message goes back to the queue rather than being acknowledged.
            log.error("could not start execution %s, message requeued: %r",
                      request.execution_id, exc)
            metrics.count_outcome("requeued")
            raise Reject(exc, requeue=True) from exc
        if started is None:
            # A start committed whose answer a failover lost is this delivery's, not a duplicate.
            try:
                started = _retrying(lambda: started_by(request))
            except DatabaseError as exc:
                log.error("could not look whether execution %s was started by this delivery "
                          "(the reaper recovers it if so): %r", request.execution_id, exc)
            if started is not None:
                log.warning("execution %s: its start was recorded before PostgreSQL's answer "
                            "was lost; running it", request.execution_id)
        return started

    def _run_body(self, request: StartRequest, tenant_id: str, args: tuple, kwargs: dict
                  ) -> object:
        """The task's body, its log records captured under its attempt when the worker
        captures execution logs (:mod:`scheduler.log_capture`)."""
        if log_capture.installed() is None:
            return super().__call__(*args, **kwargs)
        attempt_log = log_capture.AttemptLog(
            tenant_id=tenant_id, job_id=str(getattr(self.request, "chrono_job_id", "") or ""),
            execution_id=str(request.execution_id), attempt=request.attempt,
            worker_id=request.worker_id, job_type=self.name)
        with log_capture.capturing(attempt_log):
            try:
                return super().__call__(*args, **kwargs)
            except Exception as exc:
                # Celery logs the failure after the task returned, outside the attempt: the
                # attempt's log ends with it here.
                log_capture.note_failure(self.name, exc)
                raise

    def _after_failure(
        self, started: StartedExecution, exc: Exception, settings: WorkerRuntime
    ) -> str:
        """Record a failed run (its retry policy decides what follows); the outcome's name."""
        if isinstance(exc, SoftTimeLimitExceeded) and finish_cancelled(started):
            log.info("execution %s cancelled while running", started.execution_id)
            return "cancelled"
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        policy = self._retry_policy()
        try:
            # As a start or a finish, tried again when PostgreSQL failed it (a deadlock victim,
            # a failover): the update is conditional on the run's fencing token.
            outcome = _retrying(lambda: end_attempt(
                started.execution_id,
                scheduled_for=started.scheduled_for,
                fencing_token=started.fencing_token,
                from_status="RUNNING",
                attempt=started.attempt,
                policy=policy,
                error=failure_error(exc),
                error_type=error_type,
                traceback=failure_traceback(exc),
                actor=f"worker:{self.request.hostname}",
            ))
        except DatabaseError as db_exc:
            # The run stays RUNNING until its lease expires; the reaper then applies the
            # retry policy.
            log.error("could not record the failure of %s: %r", started.execution_id, db_exc)
            return "unrecorded"
        if outcome is None:
            log.warning("failure of %s not recorded: %s", started.execution_id,
                        refusal_reason(started))
            return "refused"
        if outcome.status != "RETRY_WAIT":
            log.info("execution %s ended %s", started.execution_id, outcome.status)
            return metrics.outcome_of_status(outcome.status)
        try:
            how = send_attempt(
                next_attempt_message(self._message(settings.default_queue), outcome.attempt),
                outcome, publisher=settings.publisher(), store=timer_store())
        except DispatchError as exc_send:
            # The reaper republishes RETRY_WAIT executions whose retry time has long passed.
            log.error("could not send attempt %d of %s (the reaper will): %r", outcome.attempt,
                      started.execution_id, exc_send)
            return "retrying"
        log.info("execution %s: attempt %d in %d ms (%s)", started.execution_id,
                 outcome.attempt, outcome.delay_ms, how)
        return "retrying"

    def _grant_refusal(self, settings: WorkerRuntime) -> str | None:
        """Why this delivery's tenant may not run it here; None when it may."""
        tenant_id = getattr(self.request, "chrono_tenant_id", None)
        queue = ((self.request.delivery_info or {}).get("routing_key")
                 or settings.default_queue)
        if not tenant_id:
            return f"the message of task {self.name!r} names no tenant (chrono_tenant_id)"
        return grants.refusal(tenant_id, self.name, queue)

    def _refuse(self, execution_id: str, message: str) -> None:
        """End the delivered attempt FAILED with ``message``, without running the body."""
        worker_id = self.request.hostname or "unknown"
        attempt = int(getattr(self.request, "chrono_attempt", 1) or 1)
        fire_ms = fire_ms_header(self.request)
        scheduled_for = None if fire_ms is None else ms_to_datetime(fire_ms)
        try:
            ended = _retrying(lambda: fail_ungranted_task(
                str(execution_id), attempt=attempt, message=message, worker_id=worker_id,
                scheduled_for=scheduled_for))
        except DatabaseError as exc:
            log.error("could not record that execution %s is refused (%s): %r", execution_id,
                      message, exc)
            metrics.count_outcome("requeued")
            raise Reject(exc, requeue=True) from exc
        metrics.count_outcome("not_granted" if ended else "not_startable")
        log.error("execution %s refused, body not run: %s", execution_id, message)

    def _retry_policy(self) -> RetryPolicy:
        raw = getattr(self.request, "chrono_retry_policy", None)
        return RetryPolicy.from_json(json.loads(raw)) if raw else RetryPolicy()

    def _message(self, default_queue: str) -> TaskMessage:
        """This delivery as a message, to send again for the next attempt."""
        request = self.request
        hard, soft = (list(request.timelimit or ()) + [None, None])[:2]
        return TaskMessage(
            task_id=request.id,
            task_name=self.name,
            queue=(request.delivery_info or {}).get("routing_key") or default_queue,
            args=list(request.args or ()),
            kwargs=dict(request.kwargs or {}),
            chrono_headers={k: v for k, v in vars(request).items() if k.startswith("chrono_")},
            soft_timeout_ms=None if soft is None else int(soft * 1000),
            hard_timeout_ms=None if hard is None else int(hard * 1000),
        )


@task_unknown.connect
def _fail_unregistered_task(sender: object = None, message: object = None, name: str = "",
                            **_: object) -> None:
    """A Chrono message whose task this worker does not know ends FAILED, naming the task and
    the worker. Celery itself only logs it and drops the message, which left the execution
    DISPATCHED for ever with no reason anywhere a user looks.

    Connected when this module is imported, which every worker running Chrono's tasks does
    (``ChronoTask`` is its task class), and run by the consumer that received the message."""
    headers = getattr(message, "headers", None) or {}
    execution_id = headers.get("chrono_execution_id")
    if not execution_id:
        return
    worker_id = getattr(sender, "hostname", None) or "unknown"
    fire_ms = fire_ms_of(headers.get("chrono_fire_ms"))
    try:
        ended = _retrying(lambda: fail_unregistered_task(
            str(execution_id), attempt=int(headers.get("chrono_attempt") or 1),
            task_name=name, worker_id=worker_id,
            scheduled_for=None if fire_ms is None else ms_to_datetime(fire_ms),
        ))
    except DatabaseError as exc:
        log.error("could not record that task %r of execution %s is not registered here: %r",
                  name, execution_id, exc)
        return
    if ended:
        metrics.count_outcome("unregistered")
        log.error("execution %s FAILED: task %r is not registered on this worker (%s)",
                  execution_id, name, worker_id)
    else:
        log.warning("task %r of execution %s is not registered here; the execution had "
                    "already moved on, nothing recorded", name, execution_id)
