"""The beat's and the worker's Prometheus series, and what their ``/health`` checks.

Two kinds of series, by what they cost the hot path:

* **histograms observed per job**: the beat's dispatch lateness (RabbitMQ's confirm time minus
  the occurrence's fire time, observed in the loop over a confirmed batch) and the worker's start
  lateness (the start minus the fire time). One ``observe`` is about a microsecond and takes the
  one lock prometheus_client keeps per value; nothing else is added per job;
* **counts read at scrape time** from the counters the beat already keeps
  (:class:`scheduler.beat.BeatCounters`) by :class:`BeatCollector`: nothing at all per job.

The worker's executions by outcome are one counter increment per run. The capture of
execution logs counts per process and its flusher thread adds what changed to the
``chrono_worker_log_*`` series after each flush (:func:`count_log_capture`): nothing per line.
In a prefork worker the runs happen in the pool's children: ``chrono worker
--metrics-port`` then switches prometheus_client to its multiprocess mode (each process writes
its values to a file in a directory of its own, the parent adds them up when scraped) before
this module is imported (:mod:`scheduler.multiprocess_metrics`).

Latencies are in seconds, as Prometheus' conventions want; the buckets' bounds include the
100 ms of the firing-accuracy target.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from celery.signals import worker_process_init
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from chronocore.config import ChronoConfig
from chronocore.probe import Check, CheckResult, ProbeServer, Progress, serve_probe
from scheduler import multiprocess_metrics

if TYPE_CHECKING:
    from scheduler.beat import Beat

LATENESS_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                      10.0, 30.0, 60.0, 300.0)

DISPATCH_LATENESS = Histogram(
    "chrono_beat_dispatch_lateness_seconds",
    "Confirmed publish time minus fire time of each occurrence the beat dispatched.",
    buckets=LATENESS_BUCKETS_S,
)
START_LATENESS = Histogram(
    "chrono_worker_start_lateness_seconds",
    "Start time minus fire time of each first attempt a worker started.",
    buckets=LATENESS_BUCKETS_S,
)
EXECUTIONS = Counter(
    "chrono_worker_executions",
    "Deliveries a worker handled, by outcome.",
    ["outcome"],
)
STARTS = Counter(
    "chrono_worker_starts",
    "Deliveries whose start a worker asked PostgreSQL for, by the thread that asked: consumer "
    "(a thread pool's recorder, beside Celery's consumer, for the deliveries its idle threads "
    "take, one statement a turn) or task (the task's own thread).",
    ["made_by"],
)
_STARTS = {made_by: STARTS.labels(made_by) for made_by in ("consumer", "task")}
# succeeded: recorded SUCCEEDED. retrying / dead_lettered / failed: the task raised and the
# attempt went on to another attempt, was given up, or had no retries. cancelled: asked to
# cancel while running. refused: the fencing check refused its result (its lease was lost).
# not_startable: a duplicate delivery, or cancelled before it started. requeued: its start
# could not be recorded, the message went back to the queue. unregistered: the worker does not
# know the task. unrecorded: the success could not be written (the reaper will see it lost).
OUTCOMES = ("succeeded", "retrying", "dead_lettered", "failed", "cancelled", "refused",
            "not_startable", "requeued", "unregistered", "not_granted", "unrecorded")
_OUTCOME_COUNTERS = {outcome: EXECUTIONS.labels(outcome) for outcome in OUTCOMES}
_OUTCOME_OF_STATUS = {"RETRY_WAIT": "retrying", "DEAD_LETTERED": "dead_lettered",
                      "FAILED": "failed"}


# The capture of execution logs (scheduler.log_capture), per worker process.
LOG_LINES_CAPTURED = Counter(
    "chrono_worker_log_lines_captured",
    "Log lines of tasks captured for their attempt and handed to the spool writer.",
)
LOG_SPOOLED_BYTES = Counter(
    "chrono_worker_log_spooled_bytes",
    "Bytes of log documents appended (and fsynced) to this host's spool.",
)
LOG_DROPPED_LINES = Counter(
    "chrono_worker_log_dropped_lines",
    "Log lines of tasks not kept, by reason: attempt_limit (over the per-attempt cap), "
    "buffer_full (over the process's buffer), spool_write (the spool could not be written).",
    ["reason"],
)
LOG_DROPPED_BYTES = Counter(
    "chrono_worker_log_dropped_bytes",
    "Estimated bytes of the log lines not kept, by reason (as chrono_worker_log_dropped_lines).",
    ["reason"],
)
ENGINE_CHILD_EXITS = Counter(
    "chrono_worker_workflow_engine_exits",
    "Times the worker's workflow engine child exited on its own (crashed or killed) and was "
    "started again.",
)
LOG_DROP_REASONS = ("attempt_limit", "buffer_full", "spool_write")
_DROPPED_LINES = {reason: LOG_DROPPED_LINES.labels(reason) for reason in LOG_DROP_REASONS}
_DROPPED_BYTES = {reason: LOG_DROPPED_BYTES.labels(reason) for reason in LOG_DROP_REASONS}


def count_log_capture(*, captured_lines: int, spooled_bytes: int,
                      dropped_lines: dict[str, int], dropped_bytes: dict[str, int]) -> None:
    """Add what a process's log capture did since its last call (its flusher thread)."""
    if captured_lines:
        LOG_LINES_CAPTURED.inc(captured_lines)
    if spooled_bytes:
        LOG_SPOOLED_BYTES.inc(spooled_bytes)
    for reason, lines in dropped_lines.items():
        if lines:
            _DROPPED_LINES[reason].inc(lines)
            _DROPPED_BYTES[reason].inc(dropped_bytes[reason])


def count_engine_child_exit() -> None:
    ENGINE_CHILD_EXITS.inc()


def observe_dispatch_lateness(lateness_ms: Iterable[int]) -> None:
    for value in lateness_ms:
        DISPATCH_LATENESS.observe(value / 1000)


def observe_start_lateness(lateness_ms: int) -> None:
    START_LATENESS.observe(lateness_ms / 1000)


def count_starts(made_by: str, count: int = 1) -> None:
    """``count`` deliveries' starts asked for by the ``consumer`` or a ``task``."""
    _STARTS[made_by].inc(count)


def count_outcome(outcome: str) -> None:
    """One delivery handled with ``outcome`` (one of :data:`OUTCOMES`)."""
    _OUTCOME_COUNTERS[outcome].inc()


def outcome_of_status(status: str) -> str:
    """The outcome of a failed attempt that moved to ``status``."""
    return _OUTCOME_OF_STATUS[status]


# -- the beat -----------------------------------------------------------------------------------

_BEAT_COUNTS = (
    ("published", "chrono_beat_published", "Messages published and confirmed by RabbitMQ."),
    ("batches", "chrono_beat_batches", "Batches published and handed to the recorder."),
    ("redelivered", "chrono_beat_redelivered",
     "Occurrences published again after their first claimer's ack deadline passed."),
    ("misfired", "chrono_beat_misfired",
     "Occurrences later than the misfire grace, handled by their job's misfire policy."),
    ("overlap_skipped", "chrono_beat_overlap_skipped",
     "Cron occurrences skipped because the previous one still ran (overlap policy)."),
    ("skipped_inactive", "chrono_beat_inactive_timers",
     "Timers dropped because their job was paused, cancelled or deleted."),
    ("stale", "chrono_beat_stale_timers",
     "Timers whose job had already moved on (acknowledged with the job's own next time)."),
    ("fenced", "chrono_beat_fenced",
     "Shard leases found lost at a claim, ack or publish (fenced off)."),
    ("refused", "chrono_beat_refused_timers",
     "Timers PostgreSQL refused on their own (left inflight, tried again later)."),
    ("failed_iterations", "chrono_beat_failed_iterations",
     "Loop, publish or record iterations that failed and were retried."),
)


class BeatCollector:
    """One replica's counters, shards and backlog, read when Prometheus scrapes."""

    def __init__(self, beat: Beat) -> None:
        self.beat = beat

    def collect(self):
        counters = self.beat.counters
        for attribute, name, documentation in _BEAT_COUNTS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], getattr(counters, attribute))
            yield family
        phases = CounterMetricFamily(
            "chrono_beat_phase_seconds", "Time the beat spent in each phase of its work.",
            labels=["phase"])
        for phase, spent_ms in sorted(dict(counters.phase_ms).items()):
            phases.add_metric([phase], spent_ms / 1000)
        yield phases
        yield GaugeMetricFamily("chrono_beat_owned_shards",
                                "Timer-store shards this replica holds the lease of.",
                                value=len(self.beat.ownership.leases))
        yield GaugeMetricFamily("chrono_beat_prepared_waiting",
                                "Prepared occurrences waiting in the firer for their fire time.",
                                value=self.beat.firer.waiting())


def beat_stale_after_ms(config: ChronoConfig) -> int:
    """A beat whose loop made no progress for this long is stuck: /health says 503 then (at
    least 10 s: the leases are renewed by a thread of their own, so a loop preparing a burst
    or waiting on a slow statement for a few seconds holds its shards and is not stuck)."""
    return max(config.shard_lease_ttl_ms, 10_000)


def beat_checks(beat: Beat) -> dict[str, Check]:
    """``/health`` of a beat replica: its loop goes round, its firer, recorder and lease keeper
    live."""

    def loop() -> CheckResult:
        result = beat.progress.check()
        return CheckResult(result.healthy, {
            **result.details, "replica_id": beat.replica_id,
            "owned_shards": len(beat.ownership.leases),
        })

    def threads() -> CheckResult:
        dead = [t.name for t in (beat.firer, beat.recorder, beat.keeper) if not t.is_alive()]
        return CheckResult(not dead, {"dead": dead})

    return {"loop": loop, "threads": threads}


def serve_beat_probe(beat: Beat, *, port: int, address: str,
                     registry: CollectorRegistry = REGISTRY) -> ProbeServer:
    """Serve a beat replica's ``/metrics`` and ``/health`` on ``address:port``."""
    registry.register(BeatCollector(beat))
    return serve_probe(process="beat", port=port, address=address, registry=registry,
                       checks=beat_checks(beat), progresses=[beat.progress])


# -- the worker -------------------------------------------------------------------------------


_heartbeat_progress: Progress | None = None


def heartbeat_progress(config: ChronoConfig) -> Progress:
    """The worker's heartbeats (its main process): stale once the reaper would call it dead.
    One per process, made with the settings of its first caller (the probe and the heartbeat
    thread are given the same configuration by the worker's command and signal handler)."""
    global _heartbeat_progress
    if _heartbeat_progress is None:
        _heartbeat_progress = Progress(
            "heartbeat", stale_after_ms=config.worker_heartbeat_interval_ms
            * config.worker_dead_after_missed_heartbeats)
    return _heartbeat_progress


def worker_checks(config: ChronoConfig) -> dict[str, Check]:
    return {"heartbeat": heartbeat_progress(config).check}


def serve_worker_probe(*, config: ChronoConfig, port: int, address: str) -> ProbeServer:
    """Serve a worker's ``/metrics`` and ``/health`` from its main process. In multiprocess
    mode (a prefork worker) ``/metrics`` adds up the files of every process of the worker."""
    directory = multiprocess_metrics.active()
    registry = REGISTRY
    if directory is not None:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
    server = serve_probe(process="worker", port=port, address=address, registry=registry,
                         checks=worker_checks(config), progresses=[heartbeat_progress(config)])
    worker_process_init.connect(lambda **_: server.close_inherited(), weak=False)
    return server
