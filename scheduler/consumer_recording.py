"""A pool's recording made beside its consumer: the starts of the deliveries its idle threads
(or prefork children) take, and the successes its tasks hand over, by one recorder thread.

Without this, each task thread records its own start and success (:class:`scheduler.worker.
ChronoTask`), each a statement shared with the threads doing the same at that moment
(:class:`scheduler.batching.Coalescer`): two hand-offs between threads a job, the leader's
statement and its followers' wake-ups, among 64 threads taking turns at the GIL. A worker
draining no-op jobs ran at 835-1,230 a second that way, against 1,958 with nothing recorded
(bench/RESULTS.md, sessions 27 and 28).

Here the deliveries wait in front of the pool rather than in its queue. Celery's consumer thread
only holds them, in arrival order, and at the end of each turn of its event loop (a tick of
kombu's hub, after it read the broker and ran its timers, before it waits again) wakes the
recorder thread if any arrived. A task that ends wakes it too, once for all the threads freed
before its turn. The recorder then:

1. records the successes the tasks handed it since its last turn, with one statement
   (:meth:`ConsumerRecording.finish_later`: a task returns as soon as its body did, and its
   message is acknowledged; a success not yet recorded when the process dies is found by the
   reaper when its lease expires, and run again: at least once);
2. takes as many held deliveries, in arrival order, as the pool has idle threads, starts the
   Chrono ones among them with one statement, and hands each to the pool with its start in its
   request (:data:`EARLY_START`, an :class:`EarlyStart`). The task runs its body at once.

The threads freed while a statement ran share the next one: the batches grow with the load. The
consumer's loop (the broker's reads, acknowledgements and heartbeats) never waits on PostgreSQL.
A start is recorded only once a thread is there to run its body (its time is the start lateness
users read; the task's lease keeper holds its lease from then on).

Left to the task thread, as before (no :data:`EARLY_START` in its request):

- a delivery whose tenant has not been granted its task there (or with no tenant): the task
  records the refusal;
- every delivery for :data:`PAUSE_AFTER_ERROR_S` after PostgreSQL failed a start statement
  here: the deliveries do not queue behind the recorder's failing statements; the task threads
  try, with their patience (``RECORD_OUTAGE_S``).

A delivery whose start statement failed carries its request all the same
(:attr:`EarlyStart.failed`): its task tries the same request again, with the same start time,
so that a start committed whose answer was lost is found to be its own
(:func:`scheduler.executions.started_by`). A success statement that failed is tried again on
later turns, with the task threads' patience (``outage_s`` while PostgreSQL cannot be reached,
``attempts`` times when it refused the statement), then given up as the task thread gives it
up: the run stays RUNNING until its lease expires and the reaper applies its retry policy.

A prefork pool's children are other processes (:class:`SuccessChannel`): the early start
travels pickled in the request, each child sends its success back through a datagram socket
inherited from the worker's process (the recorder reads it on the turn its result wakes), and
the deliveries are handed to the pool in the consumer's loop, which the pool requires. A prefork
pool of fewer than :data:`MIN_PREFORK_CHILDREN` children (``hold=False``) goes to its pool as
Celery sends it: each child makes its own start, as before, and only sends its success, which
the recorder records as the channel brings it (the child takes its next delivery without
waiting for that statement).

Every delivery held is handed to the pool, in arrival order, whatever happened to its start. At
the worker's stop those still held are not run: their messages, never acknowledged, go back to
the queue (as those left in the pool's own queue do). From the start of a warm shutdown the
tasks record their own successes; those handed over before it are recorded by
:meth:`ConsumerRecording.close`, once the pool has finished its tasks.
"""

from __future__ import annotations

import logging
import pickle
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError

from chronocore import grants
from chronocore.database import connection_lost
from scheduler import metrics
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.executions import FinishRequest, StartRequest, refusal_reason
from scheduler.lifecycle import StartedExecution

log = logging.getLogger("chrono.worker")

# The key of a delivery's request (the task's ``self.request``) that holds its EarlyStart. Not
# ``chrono_``-prefixed: those are the message's headers, sent again with a next attempt.
EARLY_START = "early_start"
PAUSE_AFTER_ERROR_S = 5.0
# Starts of dropped deliveries kept for their messages' next delivery, at most.
UNRUN_KEPT = 10_000
# A prefork pool with fewer children keeps its tasks' own starts (and sends only its
# successes, ``hold=False``): each job's turn through the recorder (its result back, a
# statement or two, the next delivery out) keeps a child idle for milliseconds, which many
# children hide and a few do not (bench/RESULTS.md, session 29, jobs/s through the recorder
# against recorded in the children: x2 507-635 against 814-908, x4 408 against 659, x8 870
# against 703, x64 945-1,279 against 595-663).
MIN_PREFORK_CHILDREN = 8
# Such a pool's recorder waits this long after a success arrives before it reads the channel,
# so that one statement takes the few sent meanwhile (no child waits for it). Without the wait
# it made a statement and a thread switch in the consumer's process for every job, and a
# prefork x2 worker drained 0.23-0.31 of a plain one's rate, against 0.29-0.42 with its
# children recording their own successes; with it, 0.32-0.52 (bench/RESULTS.md, session 30).
SENT_LINGER_S = 0.005


@dataclass(frozen=True, slots=True)
class EarlyStart:
    """The start made for one delivery: ``started`` is its run, or None when it may not start
    (a duplicate, a cancelled execution, a stale attempt); ``failed``: the statement failed, the
    task tries ``request`` again."""

    request: StartRequest
    started: StartedExecution | None
    failed: bool = False
    # Takes the task's success to record (False: record it yourself). Pickled with the request
    # for a prefork child: there it is :func:`send_success`.
    finish_later: Callable[[FinishRequest], bool] | None = None


@dataclass(slots=True)
class _Success:
    finish: FinishRequest
    failures: int = 0
    first_failed_at: float = 0.0


@dataclass(slots=True)
class _Delivery:
    target: Callable[..., Any]
    args: Sequence[Any]
    kwargs: dict[str, Any] | None
    options: dict[str, Any]


class ConsumerRecording:
    """Installed on one thread pool (:meth:`install`): its ``on_apply``, which Celery's consumer
    thread calls for each delivery, goes through :meth:`on_apply`.

    ``start`` runs the start statement for a batch of requests (one result per request),
    ``finish`` the success statement (whether each was recorded). ``loop`` is the consumer's
    event loop (the worker's kombu hub): its ``on_tick`` callables run on every turn, just
    before it waits for the broker. ``lease_ttl_ms`` and ``default_queue`` are the worker's;
    ``attempts`` and ``outage_s`` its patience with a failed statement
    (:func:`scheduler.worker._retrying`). ``recorder``: run the recorder thread (tests call
    :meth:`flush` themselves)."""

    def __init__(self, pool: Any, *, start: Callable[[Sequence[StartRequest]],
                                                     Sequence[StartedExecution | None]],
                 finish: Callable[[Sequence[FinishRequest]], Sequence[bool]],
                 loop: Any, lease_ttl_ms: int, default_queue: str, attempts: int,
                 outage_s: float, recorder: bool = True,
                 channel: SuccessChannel | None = None, hold: bool = True) -> None:
        self.pool = pool
        self.limit = max(int(pool.limit), 1)
        self.start = start
        self.finish = finish
        self.attempts = attempts
        self.outage_s = outage_s
        self.loop = loop
        self.lease_ttl_ms = lease_ttl_ms
        self.default_queue = default_queue
        self.early = 0  # deliveries handed over with their start made, for tests
        # A prefork pool's: its children send their successes here, and its deliveries are
        # handed over in the consumer's loop (the pool is not thread-safe).
        self.channel = channel
        self._finish_later = self.finish_later if channel is None else send_success
        self._apply = pool.on_apply
        # Appended to by the consumer thread, taken from by the recorder.
        self._held: deque[_Delivery] = deque()
        self._arrived = False  # during the consumer loop's current turn
        # The recorder's alone:
        self._paused_until = 0.0
        self._refused = False
        self._retry_at = 0.0  # no success statement before (after one failed)
        # Deliveries handed to the pool and not yet done, whether the recorder has work, the
        # successes handed over: the consumer, the task threads and the recorder share them.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._busy = 0
        self._flush_due = False
        self._successes: list[_Success] = []
        self._to_hand_over: deque[tuple[_Delivery, _Slot]] = deque()
        # Starts made for deliveries a prefork pool dropped unrun, by execution id.
        self._unrun: dict[str, EarlyStart] = {}
        self._closing = False
        self._stopped = False
        # False: a prefork pool's children make their own starts and only send their
        # successes (the pool's deliveries go to it as they come): the recorder records what
        # the channel brings.
        self.hold = hold
        self._recorder = (threading.Thread(target=self._record, name="chrono-recorder",
                                           daemon=True) if recorder else None)

    def install(self) -> ConsumerRecording:
        if not self.hold:
            if self._recorder is not None:
                self._recorder.start()
            return self
        self.pool.on_apply = self.on_apply
        self._pool_flush = getattr(self.pool, "flush", None)
        self.pool.flush = self.drop_held
        # Deliveries reach on_apply from the loop's reads, its timers or its ready callbacks:
        # a tick runs after all of them, before the loop waits again.
        self.loop.on_tick.add(self._tick)
        if self._recorder is not None:
            self._recorder.start()
        return self

    def _record(self) -> None:
        """The recorder thread: a flush whenever there is work, and when a failed success
        statement is due again."""
        wait = self._wait_for_work if self.hold else self._wait_for_sent
        while wait():
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the recorder must outlive any one flush
                log.exception("the consumer's recording failed a turn")

    def _wait_for_work(self) -> bool:
        """Until deliveries or successes wait, or a failed success statement is due again;
        False once stopped."""
        with self._work:
            while not self._flush_due and not self._stopped:
                retry_in = self._retry_at - time.monotonic() if self._successes else 1.0
                if retry_in <= 0:
                    break
                self._work.wait(min(retry_in, 1.0))
            return not self._stopped

    def _wait_for_sent(self) -> bool:
        """A pool whose children only send their successes (``hold=False``): until one is in
        the channel, then :data:`SENT_LINGER_S` more, or a failed statement is due again;
        False once stopped."""
        retry_in = self._retry_at - time.monotonic() if self._successes else 1.0
        # Not woken by close(): a short wait keeps the worker's stop short.
        if self.channel is not None and self.channel.wait(min(max(retry_in, 0.0), 0.2)):
            time.sleep(SENT_LINGER_S)
        return not self._stopped

    def on_apply(self, target: Callable[..., Any], args: Sequence[Any] | None = None,
                 kwargs: dict[str, Any] | None = None, **options: Any) -> None:
        """Hold the delivery until a thread is idle to run it (any delivery, so that they reach
        the pool in the order they came)."""
        self._held.append(_Delivery(target, args or (), kwargs, options))
        self._arrived = True

    def drop_held(self) -> None:
        """The consumer lost its broker connection (Celery flushes the pool then): the
        deliveries held, never started, are dropped as Celery drops those it had not yet handed
        to the pool; the broker delivers their messages again."""
        dropped = len(self._held)
        self._held.clear()
        if dropped:
            log.warning("broker connection lost: %d deliveries waiting for the pool dropped "
                        "(the broker delivers them again)", dropped)
        if self._pool_flush is not None:
            self._pool_flush()

    def _tick(self) -> None:
        """The end of the consumer loop's turn: what arrived during it goes to the recorder in
        one wake-up."""
        if self._arrived:
            self._arrived = False
            self._wake()

    def _freed(self) -> None:
        """A task thread is idle again (called in it): the recorder takes the next deliveries
        and the successes, woken once for all the threads freed before its turn."""
        with self._lock:
            self._busy -= 1
            # A prefork child sent its success before its result reached the consumer.
            if ((self._held or self._successes or self.channel is not None)
                    and not self._flush_due):
                self._flush_due = True
                self._work.notify()

    def _wake(self) -> None:
        with self._lock:
            if not self._flush_due:
                self._flush_due = True
                self._work.notify()

    def finish_later(self, finish: FinishRequest) -> bool:
        """Take a task's success, to record on the recorder's next turn (called in the task's
        thread, which wakes the recorder as it ends); False from the start of a shutdown, when
        the task records it itself."""
        with self._lock:
            if self._closing:
                return False
            self._successes.append(_Success(finish))
        return True

    def closing(self) -> None:
        """A warm shutdown began: the tasks record their own successes from now on."""
        with self._lock:
            self._closing = True

    def close(self, *, sleep: Callable[[float], None] = time.sleep) -> None:
        """Stop the recorder and record the successes still held (once the pool has finished
        its tasks), waiting out a failed statement with the tasks' patience."""
        self.closing()
        with self._lock:
            self._stopped = True
            self._work.notify()
        if self._recorder is not None and self._recorder.is_alive():
            self._recorder.join(self.outage_s + 5.0)
        while True:
            self._receive_successes()
            with self._lock:
                waiting = bool(self._successes)
            if not waiting:
                return
            sleep(max(0.0, self._retry_at - time.monotonic()))
            self._record_successes()

    def flush(self) -> None:
        """Record the successes handed over, then hand as many held deliveries to the pool as
        it has idle threads, the Chrono ones among them started first."""
        self._receive_successes()
        with self._lock:
            # Cleared before the idle threads are counted: a thread freed after the count asks
            # for the next flush itself.
            self._flush_due = False
            idle = self.limit - self._busy
            successes = bool(self._successes)
        if successes and time.monotonic() >= self._retry_at:
            self._record_successes()
        if idle <= 0 or not self._held:
            return
        taken = [self._held.popleft() for _ in range(min(idle, len(self._held)))]
        # Each takes its thread (its process) now, before the next count of the idle ones.
        slots = [_Slot(self) for _ in taken]
        try:
            self._start_early(taken)
        except Exception:  # noqa: BLE001 - whatever failed, no delivery may be lost
            log.exception("starting %d deliveries in the consumer failed; their tasks start "
                          "them", len(taken))
        if self.channel is None:
            for delivery, slot in zip(taken, slots, strict=True):
                self._hand_over(delivery, slot)
            return
        with self._lock:
            self._to_hand_over.extend(zip(taken, slots, strict=True))
        # Thread-safe: it wakes the loop from its wait for the broker.
        self.loop.call_soon(self._hand_over_taken)

    def _hand_over_taken(self) -> None:
        """In the consumer's loop: hand a prefork pool what the recorder took, in order."""
        while True:
            with self._lock:
                if not self._to_hand_over:
                    return
                delivery, slot = self._to_hand_over.popleft()
            self._hand_over(delivery, slot)

    def _on_discard(self, job: Any, delivery: _Delivery, slot: _Slot) -> None:
        """A job the pool drops when the consumer lost its broker connection gives its place
        back. billiard drops every job no child has acknowledged yet: one already being
        written to a child still runs there (``_write_to`` is set as its writing begins);
        one still in the pool's buffer never runs. A start made here for the latter is kept
        for its message, which the broker delivers again (:meth:`_unrun_start`)."""
        discard = getattr(job, "discard", None)
        if discard is None:
            return
        request_dict = _request_dict(delivery.args)
        early = None if request_dict is None else request_dict.get(EARLY_START)

        def discarded() -> None:
            slot.free()
            if (early is not None and early.started is not None
                    and getattr(job, "_write_to", None) is None):
                with self._lock:
                    if len(self._unrun) >= UNRUN_KEPT:  # never delivered here again
                        self._unrun.clear()
                    self._unrun[early.request.execution_id] = early
            discard()
        job.discard = discarded

    def _receive_successes(self) -> None:
        if self.channel is None:
            return
        received = self.channel.receive()
        if received:
            with self._lock:
                self._successes.extend(_Success(finish) for finish in received)

    def _record_successes(self) -> None:
        with self._lock:
            successes, self._successes = self._successes, []
        if not successes:
            return
        try:
            recorded = self.finish([success.finish for success in successes])
        except DatabaseError as exc:
            self._failed_successes(successes, exc)
            return
        for success, ok in zip(successes, recorded, strict=True):
            if ok:
                metrics.count_outcome("succeeded")
                continue
            metrics.count_outcome("refused")
            started = success.finish.started
            try:
                reason = refusal_reason(started)
            except DatabaseError as exc:
                reason = f"(could not be read: {exc!r})"
            log.warning("result of %s not recorded: %s", started.execution_id, reason)

    def _failed_successes(self, successes: list[_Success], exc: DatabaseError) -> None:
        """A success statement failed: its successes wait for a later turn, or are given up
        once the tasks' patience is spent (the reaper then finds them lost)."""
        now = time.monotonic()
        lost = connection_lost(exc)
        kept: list[_Success] = []
        for success in successes:
            success.failures += 1
            success.first_failed_at = success.first_failed_at or now
            spent = (now - success.first_failed_at >= self.outage_s if lost
                     else success.failures >= self.attempts)
            if spent:
                metrics.count_outcome("unrecorded")
                log.error("could not record the success of %s: %r",
                          success.finish.started.execution_id, exc)
            else:
                kept.append(success)
        if not kept:
            return
        pause = min(0.05 * 2 ** min(max(s.failures for s in kept), 5), 1.0)
        self._retry_at = now + pause
        log.warning("recording %d successes failed, again in %.2f s: %r", len(kept), pause, exc)
        with self._lock:
            self._successes[:0] = kept

    def _start_early(self, taken: list[_Delivery]) -> None:
        if time.monotonic() < self._paused_until:
            return
        chosen: list[tuple[dict[str, Any], StartRequest]] = []
        at_ms = now_ms()
        for delivery in taken:
            request_dict = _request_dict(delivery.args)
            if request_dict is None or not self._granted(delivery.args[0], request_dict):
                continue
            request = start_request(request_dict, self.lease_ttl_ms, at_ms)
            unrun = self._unrun_start(request)
            if unrun is not None:
                request_dict[EARLY_START] = unrun
            else:
                chosen.append((request_dict, request))
        if not chosen:
            return
        requests = [request for _, request in chosen]
        metrics.count_starts("consumer", len(requests))
        try:
            results = self.start(requests)
        except DatabaseError as exc:
            self._paused_until = time.monotonic() + PAUSE_AFTER_ERROR_S
            log.warning("starting %d executions in the consumer failed; their tasks try again, "
                        "and the next %.0f s of deliveries start in their tasks: %r",
                        len(requests), PAUSE_AFTER_ERROR_S, exc)
            for request_dict, request in chosen:
                request_dict[EARLY_START] = EarlyStart(request, None, failed=True,
                                                       finish_later=self._finish_later)
            return
        for (request_dict, request), started in zip(chosen, results, strict=True):
            request_dict[EARLY_START] = EarlyStart(request, started,
                                                   finish_later=self._finish_later)
        self.early += len(chosen)

    def _unrun_start(self, request: StartRequest) -> EarlyStart | None:
        """The start made here for this delivery's attempt when the pool dropped its first
        delivery unrun, while that start's lease surely holds: the run is this delivery's (a
        new start would be refused, the run being RUNNING, and it would wait for the reaper
        to find it lost). None otherwise: delivered to another worker, the message waits for
        the lease's expiry there."""
        if not self._unrun:
            return None
        with self._lock:
            early = self._unrun.pop(request.execution_id, None)
        if (early is None or early.request.attempt != request.attempt
                or request.at_ms - early.request.at_ms > self.lease_ttl_ms // 2):
            return None
        log.info("execution %s: delivered again after the pool dropped it unrun (broker "
                 "connection lost); run on the start made for it", request.execution_id)
        return early

    def _granted(self, task_name: object, request_dict: dict[str, Any]) -> bool:
        """Whether the delivery's tenant was granted its task on its queue (a refusal, an
        unknown, or an error reading the grants: its task decides and records)."""
        tenant_id = request_dict.get("chrono_tenant_id")
        if not tenant_id:
            return False
        queue = (request_dict.get("delivery_info") or {}).get("routing_key") or self.default_queue
        try:
            return grants.refusal(tenant_id, str(task_name), queue) is None
        except DatabaseError:
            return False

    def _hand_over(self, delivery: _Delivery, slot: _Slot) -> None:
        options = dict(delivery.options)
        options["callback"] = slot.freeing(options.get("callback"))
        # A prefork pool's: its child died, or the task's hard time limit ended it.
        options["error_callback"] = slot.freeing(options.get("error_callback"))
        try:
            result = self._apply(delivery.target, delivery.args, delivery.kwargs, **options)
        except Exception:  # noqa: BLE001 - the others are still to be handed over
            slot.free()
            # A pool that takes nothing more is stopping. Unacknowledged, the message goes back
            # to the queue when the worker's connection closes; an execution started above
            # stays RUNNING until its lease expires, when the reaper sends it again.
            if not self._refused:
                self._refused = True
                log.exception("the thread pool refused a delivery (stopping?)")
            return
        if self.channel is not None:
            # A prefork pool calls one of the two callbacks for every job it runs; one it
            # discards when the consumer lost its broker connection gives its place back too.
            self._on_discard(result, delivery, slot)
            return
        future = getattr(result, "f", None)  # celery.concurrency.thread.ApplyResult's
        if future is None:
            # Nothing would say when a task that failed outside its body ends: the deliveries
            # go to the pool as they come from now on, started by their tasks.
            log.warning("the thread pool's results carry no future; deliveries are no longer "
                        "held for idle threads")
            slot.free()
            self.limit = 1 << 30
            self._paused_until = float("inf")
            return
        future.add_done_callback(slot.free)


class _Slot:
    """A delivery's place among the pool's busy threads, given back once: by the task's
    success callback (the task has returned; its message is acknowledged next) or, when it
    ended otherwise, as its future ends. Both run in the task's thread."""

    __slots__ = ("owner", "taken")

    def __init__(self, owner: ConsumerRecording) -> None:
        self.owner = owner
        self.taken = True
        with owner._lock:
            owner._busy += 1

    def free(self, _future: object = None) -> None:
        if self.taken:
            self.taken = False
            self.owner._freed()

    def freeing(self, callback: Callable[..., Any] | None) -> Callable[..., Any]:
        def free_then_call(*args: Any, **kwargs: Any) -> Any:
            self.free()
            return None if callback is None else callback(*args, **kwargs)
        return free_then_call


def _request_dict(args: Sequence[Any]) -> dict[str, Any] | None:
    """The request of a Chrono delivery (Celery hands the pool ``(task name, task id, request,
    body, content type, content encoding)``); None for any other call."""
    if len(args) > 2 and isinstance(args[2], dict) and args[2].get("chrono_execution_id"):
        return args[2]
    return None


def start_request(request: Mapping[str, Any], lease_ttl_ms: int, at_ms: int) -> StartRequest:
    """The start of the delivery whose request (its headers, ``hostname`` among them) is
    ``request``: the recorder's, and a task's own (``vars(task.request)``)."""
    fire_ms = fire_ms_of(request.get("chrono_fire_ms"))
    return StartRequest(
        execution_id=str(request["chrono_execution_id"]),
        attempt=int(request.get("chrono_attempt") or 1),
        worker_id=request.get("hostname") or "unknown",
        lease_ttl_ms=lease_ttl_ms,
        at_ms=at_ms,
        # The partition key (scheduler.lifecycle, "Partition key").
        scheduled_for=None if fire_ms is None else ms_to_datetime(fire_ms),
    )


def fire_ms_of(raw: object) -> int | None:
    """A ``chrono_fire_ms`` header's value; None when absent or not a number."""
    try:
        return int(raw) if raw else None  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


class SuccessChannel:
    """How a prefork pool's children hand their successes to the recorder in their parent: a
    pair of connected datagram sockets, made before the pool forks, so that every child
    (those forked later to replace one included) inherits the sending end; nothing outside
    the worker's process tree can reach it. A datagram arrives whole or not at all, and is
    in the parent's socket before the child's result reaches the consumer, which wakes the
    recorder: the success is read on that turn (a recorder that makes no starts, ``hold=False``,
    waits on the socket itself)."""

    # A success larger than this (a large result) is recorded by its task, as a failed send is.
    MAX_BYTES = 64 * 1024
    # A parent that stopped reading: the child records the success itself after this long.
    SEND_TIMEOUT_S = 5.0

    def __init__(self, *, starts: bool = True) -> None:
        # Whether the worker's process makes the children's starts too (``hold``).
        self.starts = starts
        self.receiver, self.sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.receiver.setblocking(False)
        self.sender.settimeout(self.SEND_TIMEOUT_S)

    def send(self, finish: FinishRequest) -> bool:
        """In a child: hand ``finish`` over; False when it was not (the task records it)."""
        try:
            data = pickle.dumps(finish, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a result pickle cannot carry: the task records it
            return False
        if len(data) > self.MAX_BYTES:
            return False
        try:
            self.sender.send(data)
        except OSError as exc:
            log.warning("could not hand the success of %s to the worker's recorder (recorded "
                        "by the task): %r", finish.started.execution_id, exc)
            return False
        return True

    def wait(self, timeout_s: float) -> bool:
        """In the parent: whether a success is there to read, waiting up to ``timeout_s``."""
        try:
            readable, _, _ = select.select([self.receiver], [], [], timeout_s)
        except (OSError, ValueError):  # closed
            time.sleep(timeout_s)
            return False
        return bool(readable)

    def receive(self) -> list[FinishRequest]:
        """In the parent: every success sent and not yet read."""
        received: list[FinishRequest] = []
        while True:
            try:
                data = self.receiver.recv(self.MAX_BYTES)
            except (BlockingIOError, InterruptedError):
                return received
            except OSError:
                return received  # closed
            try:
                # Only this process's pool children hold the other end of the pair.
                received.append(pickle.loads(data))  # noqa: S301  # nosec B301
            except Exception:  # noqa: BLE001 - one bad datagram must not lose the others
                log.exception("a success handed over by a pool child could not be read")

    def child_side(self) -> None:
        """In a child after the fork: it only sends."""
        self.receiver.close()

    def close(self) -> None:
        self.receiver.close()
        self.sender.close()


_channel: list[SuccessChannel] = []


def open_success_channel(*, starts: bool = True) -> SuccessChannel:
    """Made in a worker's process before its pool forks (``worker_init``); ``starts``: the
    worker's process makes the children's starts too."""
    if not _channel:
        _channel.append(SuccessChannel(starts=starts))
    return _channel[0]


def success_channel() -> SuccessChannel | None:
    return _channel[0] if _channel else None


def close_success_channel() -> None:
    while _channel:
        _channel.pop().close()


def send_success(finish: FinishRequest) -> bool:
    """A prefork child's :attr:`EarlyStart.finish_later` (pickled by name with the request),
    and what it does with a success it started itself: hand ``finish`` to the recorder in the
    worker's process; False when it was not (no channel: a thread or solo pool)."""
    return bool(_channel) and _channel[0].send(finish)
