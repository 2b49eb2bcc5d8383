"""``chrono bench peers``: Chrono side by side with the schedulers users would pick instead.

On this machine, one system after another in one run, on identical workloads (issue 19):

* ``cron N``: N entries every minute (``* * * * *``), ``--minutes`` (2) consecutive minutes;
* ``one-time M``: M jobs due evenly over the 60 s after a lead time.

Systems (``--systems``): ``beat`` (Celery beat's default scheduler, cron only),
``django-celery-beat`` (periodic tasks for cron, one-off clocked tasks for one-time jobs),
``redbeat`` (cron only), ``celery-eta`` (``apply_async(eta=...)``, one-time only), ``chrono``
(Chrono's beat with the same plain Celery worker as the peers) and ``chrono-worker`` (Chrono's
beat with Chrono's own worker, which records every start and finish). A system that has no way
to express a workload gets a row saying so.

The peers run at pinned versions in a virtualenv of their own (:mod:`bench.peers_env`). Every
system but ``chrono-worker`` runs on one worker kind: a plain Celery prefork worker of
concurrency 2 whose no-op task records its start (``bench/peers_project/peers_celery.py``);
``chrono-worker``'s starts are read from the executions table. Per system and workload: fired
vs expected, missed, duplicates, publish and start lateness p50/p99/max, the publish rate in
the burst and the worker's memory per pending job (:mod:`bench.peers_report`). Every run has a
timeout (``--timeout``); each stops its processes and deletes its queue, the Redis database is
flushed between runs, and ``chrono_peers`` is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.ceilings import reports_ceilings
from bench.common import _descendants, ensure_platform_ready, machine, new_queue, process_group
from bench.peers_env import (
    PeerProcesses,
    create_peers_database,
    default_venv,
    drop_peers_database,
    ensure_venv,
    peer_env,
)
from bench.peers_report import Start, bytes_per_pending_job, markdown_table, summarize
from bench.platform import BenchPlatform, bench_platform, use_bench_redis_db
from chronocore.config import get_config
from chronocore.redis_client import redis_client
from localservices.processes import ChronoProcess, wait_until
from scheduler import api, job_writer, specs
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.models import FINISHED_EXECUTION_STATUSES, ExecutionStatus

SYSTEMS = ("beat", "django-celery-beat", "redbeat", "celery-eta", "chrono", "chrono-worker")
CRON_SYSTEMS = ("beat", "django-celery-beat", "redbeat", "chrono", "chrono-worker")
ONE_TIME_SYSTEMS = ("django-celery-beat", "celery-eta", "chrono", "chrono-worker")
STARTS_KEY = "peers:starts"
MINUTE_MS = 60_000
SPREAD_MS = 60_000
# A scheduler is stopped this long into the minute after the last measured one: a late one
# may still be publishing the last minute's burst (10 s and 4 ms an entry: ~250 publishes a
# second, half RedBeat's rate of issue 19, at most 50 s), and none fires the next before its
# time. What it would have published later counts as missed.
STOP_AFTER_LAST_MS = 50_000


def stop_after_last_ms(entries: int) -> int:
    return min(STOP_AFTER_LAST_MS, 10_000 + 4 * entries)
# The records are complete when they stop growing for this long (a peer that missed
# occurrences never reaches the expected count).
SETTLED_S = 5.0


@dataclass(frozen=True)
class Workload:
    kind: str  # "cron" or "one-time"
    size: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.size:,}"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of sizes: {text!r}") from None
    if any(size < 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"sizes must not be negative: {text!r}")
    return [size for size in sizes if size]


def _systems(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(SYSTEMS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown systems {unknown or text!r}: choose among {', '.join(SYSTEMS)}")
    return names


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench peers")
    parser.add_argument("--systems", type=_systems, default=list(SYSTEMS),
                        help=f"comma-separated, among {', '.join(SYSTEMS)} (default: all)")
    parser.add_argument("--cron-jobs", type=_sizes, default=[1_000, 10_000],
                        help="cron entries every minute, one run per size (0: none)")
    parser.add_argument("--one-time-jobs", type=_sizes, default=[10_000, 100_000],
                        help="one-time jobs over 60 s, one run per size (0: none)")
    parser.add_argument("--minutes", type=int, default=2, help="cron minutes measured")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds a run may take past its last due time")
    parser.add_argument("--venv", type=Path, default=None,
                        help="the peers' virtualenv (default: <data_dir>/bench-peers)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="where results.json, table.md and lateness.png go "
                        "(default: a new temporary directory)")
    args = parser.parse_args(argv)
    if args.minutes < 1 or args.timeout <= 0:
        parser.error("--minutes and --timeout must be positive")
    return args


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="chrono-bench-peers-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(args.venv or default_venv())
    use_bench_redis_db()
    ensure_platform_ready()
    create_peers_database()
    workloads = ([Workload("cron", n) for n in args.cron_jobs]
                 + [Workload("one-time", m) for m in args.one_time_jobs])
    rows: list[dict[str, object]] = []
    try:
        group = process_group("peers-setup")
        PeerProcesses(python, group, peer_env()).run(["-m", "peers_setup", "migrate"],
                                                      timeout_s=120)
        for workload in workloads:
            for system in args.systems:
                rows.append(_run_one(system, workload, python, args))
                print(json.dumps(rows[-1]), flush=True)  # noqa: T201 - progress of a long run
    finally:
        redis_client().flushdb()
        drop_peers_database()
    result = {"bench": "peers", "machine": machine(), "minutes": args.minutes, "rows": rows,
              "table": markdown_table(rows)}
    (out_dir / "results.json").write_text(json.dumps(result, indent=1))
    (out_dir / "table.md").write_text(result["table"] + "\n")
    chart = out_dir / "lateness.png"
    group = process_group("peers-chart")
    PeerProcesses(python, group, peer_env()).run(
        ["-m", "peers_setup", "chart", str(out_dir / "results.json"), str(chart)], timeout_s=120)
    return {**result, "out_dir": str(out_dir), "chart": str(chart)}


def _run_one(system: str, workload: Workload, python: Path,
             args: argparse.Namespace) -> dict[str, object]:
    row: dict[str, object] = {"system": system, "workload": workload.label}
    capable = CRON_SYSTEMS if workload.kind == "cron" else ONE_TIME_SYSTEMS
    if system not in capable:
        return {**row, "skipped": f"no {workload.kind} jobs"}
    redis_client().flushdb()
    started = time.monotonic()
    try:
        if system.startswith("chrono"):
            report = _run_chrono(workload, python, args, own_worker=system == "chrono-worker")
        else:
            report = _run_peer(system, workload, python, args)
    except Exception as exc:  # noqa: BLE001 - one system's failure is its row, not the run's end
        return {**row, "skipped": f"failed: {type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        redis_client().flushdb()
    return {**row, **report, "run_s": round(time.monotonic() - started, 1)}


def _run_peer(system: str, workload: Workload, python: Path,
              args: argparse.Namespace) -> dict[str, object]:
    queue = new_queue(f"peers-{system}")
    group = process_group(f"peers-{system}")
    peers = PeerProcesses(python, group, peer_env(queue))
    try:
        worker = peers.worker(queue)
        wait_for_consumer(queue, worker)
        with RssSampler(worker.pid) as rss:
            if workload.kind == "cron":
                minutes = _cron_peer(system, workload.size, peers, queue, args)
                expected, due_end = workload.size * len(minutes), minutes[-1]
            else:
                start_ms = _one_time_peer(system, workload.size, peers, queue)
                minutes, expected, due_end = [], workload.size, start_ms + SPREAD_MS
            completed = _wait_for_starts(expected, due_end, args.timeout)
            starts = read_starts()
        report = summarize(starts, expected=expected, minutes=minutes)
    finally:
        group.stop_all()
        delete_queue_and_exchange(queue)
        if system == "django-celery-beat":
            peers.run(["-m", "peers_setup", "dcb-clear"], timeout_s=300)
    return {**report, "completed_in_time": completed,
            **rss.report(pending=expected),
            "logs": str(group.log_dir)}


def _cron_peer(system: str, entries: int, peers: PeerProcesses, queue: str,
               args: argparse.Namespace) -> list[int]:
    """Start ``system``'s beat with ``entries`` every minute; the measured minutes, once the
    scheduler is stopped after the last one."""
    if system == "django-celery-beat":
        peers.run(["-m", "peers_setup", "dcb-cron", str(entries)], timeout_s=300)
    first = _first_minute(lead_ms=15_000 + entries)
    schedule_dir = Path(tempfile.mkdtemp(dir=peers.group.log_dir, prefix="schedule-"))
    env = {"PEERS_CRON_JOBS": str(entries)} if system != "django-celery-beat" else {}
    beat = peers.beat(system, queue, schedule_dir, **env)
    minutes = [first + i * MINUTE_MS for i in range(args.minutes)]
    _sleep_until(minutes[-1] + stop_after_last_ms(entries), beat)
    beat.stop()
    return minutes


def _one_time_peer(system: str, jobs: int, peers: PeerProcesses, queue: str) -> int:
    """Schedule ``jobs`` one-time jobs due over 60 s; the first due time."""
    if system == "celery-eta":
        # apply_async sends some thousands a second: the first is due once all are sent.
        start_ms = now_ms() + 5_000 + jobs // 2
        peers.run(["-m", "peers_setup", "eta", str(jobs), str(start_ms)], timeout_s=600,
                  PEERS_STAMP="0")
        return start_ms
    start_ms = now_ms() + 15_000 + jobs // 5
    peers.run(["-m", "peers_setup", "dcb-once", str(jobs), str(start_ms)], timeout_s=600)
    beat = peers.beat(system, queue, Path(tempfile.mkdtemp(dir=peers.group.log_dir)))
    _sleep_until(start_ms + SPREAD_MS + stop_after_last_ms(jobs), beat)
    beat.stop()
    return start_ms


def _run_chrono(workload: Workload, python: Path, args: argparse.Namespace, *,
                own_worker: bool) -> dict[str, object]:
    with bench_platform("peers") as platform:
        platform.start_beat("peers-beat-0")
        if own_worker:
            worker = platform.start_worker(2, "prefork")
            task_name = "chrono.noop"
        else:
            worker = PeerProcesses(python, platform.group, peer_env(platform.queue)).worker(
                platform.queue, queue_type="quorum")
            wait_for_consumer(platform.queue, worker)
            task_name = "peers.record"
        with RssSampler(worker.pid) as rss:
            if workload.kind == "cron":
                first = _chrono_cron(platform, task_name, workload.size)
                minutes = [first + i * MINUTE_MS for i in range(args.minutes)]
                expected, due_end = workload.size * len(minutes), minutes[-1]
                _sleep_until(due_end + stop_after_last_ms(workload.size),
                             platform.beats["peers-beat-0"])
                platform.beats["peers-beat-0"].stop()
            else:
                start_ms = _chrono_one_time(platform, task_name, workload.size)
                minutes, expected, due_end = [], workload.size, start_ms + SPREAD_MS
            counter = _execution_starts(platform) if own_worker else None
            completed = _wait_for_starts(expected, due_end, args.timeout, count=counter)
            starts = (_execution_start_list(platform) if own_worker else read_starts())
        report = summarize(starts, expected=expected, minutes=minutes)
    if not own_worker:  # the exchange Celery declared for the queue
        delete_queue_and_exchange(platform.queue)
    return {**report, "completed_in_time": completed, **rss.report(pending=expected),
            "logs": str(platform.group.log_dir)}


def _chrono_cron(platform: BenchPlatform, task_name: str, jobs: int) -> int:
    """``jobs`` cron jobs every minute, written by the bulk path; their first minute."""
    first = _first_minute(lead_ms=8_000)
    limits = job_writer.current_limits()
    # overlap allow: every minute fires, as the peers' do, whatever the last left queued.
    spec = specs.checked_spec({"job_type": task_name, "cron_expression": "* * * * *",
                               "queue": platform.queue, "overlap_policy": "allow"}, limits)
    tenant_id = str(platform.tenant.tenant_id)
    for offset in range(0, jobs, 5_000):
        job_writer.copy(tenant_id, [spec] * min(5_000, jobs - offset), by="bench")
    return first


def _chrono_one_time(platform: BenchPlatform, task_name: str, jobs: int) -> int:
    start_ms = now_ms() + 5_000 + jobs // 10
    for offset in range(0, jobs, 20_000):
        fire_times = [ms_to_datetime(start_ms + i * SPREAD_MS // jobs)
                      for i in range(offset, min(jobs, offset + 20_000))]
        api.schedule_once_many(task_name, tenant=platform.tenant, fire_times=fire_times,
                               queue=platform.queue)
    return start_ms


def _execution_starts(platform: BenchPlatform) -> Callable[[], int]:
    # Read from the tenant's status index (running or ended: the no-op jobs here all succeed),
    # not ``started_at IS NOT NULL``, which read every row of the tenant's 20,000 executions
    # twice a second while Chrono's worker ran: PostgreSQL's CPU taken from the system measured.
    started = platform.executions.filter(
        status__in=(ExecutionStatus.RUNNING, *FINISHED_EXECUTION_STATUSES))
    return started.count


def _execution_start_list(platform: BenchPlatform) -> list[Start]:
    rows = platform.executions.filter(started_at__isnull=False).values_list(
        "execution_id", "scheduled_for", "dispatched_at", "started_at")
    return [Start(str(e), _ms(due), _ms(published) if published else None, _ms(started))
            for e, due, published, started in rows]


def _ms(moment) -> int:
    return round(moment.timestamp() * 1000)


def _first_minute(*, lead_ms: int) -> int:
    """The first minute boundary at least ``lead_ms`` away, with no boundary between now and
    the end of the lead (a scheduler started now fires nothing before the measured minutes):
    when the next boundary is too close, wait until just past it."""
    now = now_ms()
    boundary = (now // MINUTE_MS + 1) * MINUTE_MS
    if boundary - now < lead_ms:
        time.sleep((boundary - now) / 1000 + 0.5)
        boundary += MINUTE_MS
    return boundary


def _sleep_until(when_ms: int, process: ChronoProcess) -> None:
    while (left := when_ms - now_ms()) > 0:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited: {process.log_tail(15)}")
        time.sleep(min(1.0, left / 1000))


def _wait_for_starts(expected: int, due_end_ms: int, timeout_s: float,
                     count: Callable[[], int] | None = None) -> bool:
    """Wait past the last due time until every start is recorded, or the records have stopped
    growing for ``SETTLED_S`` (a peer that missed some), or ``timeout_s``; whether all came."""
    count = count or (lambda: redis_client().llen(STARTS_KEY))
    wait_until(lambda: now_ms() >= due_end_ms, timeout_s=(due_end_ms - now_ms()) / 1000 + 5,
               interval_s=0.5)
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        seen = count()
        if seen >= expected:
            return True
        if seen != last:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= SETTLED_S:
            return False
        time.sleep(0.5)
    return False


def read_starts() -> list[Start]:
    """Every start the peer worker recorded (``key|due|published|started``)."""
    starts = []
    for line in redis_client().lrange(STARTS_KEY, 0, -1):
        key, due, published, started = line.decode().split("|")
        starts.append(Start(key, int(due) if due else None,
                            int(published) if published else None, int(started)))
    return starts


def wait_for_consumer(queue: str, process: ChronoProcess, *, timeout_s: float = 60) -> None:
    """Until ``queue`` has a consumer (the worker declared it and is reading)."""
    process.wait_until(lambda: _consumers(queue) > 0, timeout_s=timeout_s,
                       what="consuming its queue")


def _consumers(queue: str) -> int:
    import amqp

    from scheduler.dispatch import amqp_connection_params

    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        try:
            _, _, consumers = conn.channel().queue_declare(queue, passive=True)
        except amqp.NotFound:
            return 0
    return consumers


def delete_queue_and_exchange(queue: str) -> None:
    """The peer's queue and the direct exchange of its name Celery declared for it."""
    import amqp

    from scheduler.dispatch import amqp_connection_params

    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        channel = conn.channel()
        channel.queue_delete(queue)
        try:
            channel.exchange_delete(queue)
        except amqp.NotFound:
            pass


class RssSampler:
    """The resident memory of a worker's process tree, sampled every half second: its value
    when sampling began and its peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = self.peak = _tree_rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, _tree_rss(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, *, pending: int) -> dict[str, object]:
        return {"worker_rss_mb": {"baseline": round(self.baseline / 2**20, 1),
                                  "peak": round(self.peak / 2**20, 1)},
                "worker_bytes_per_pending_job": bytes_per_pending_job(
                    baseline_rss=self.baseline, peak_rss=self.peak, pending=pending)}


def _tree_rss(pid: int) -> int:
    total = 0
    for member in _descendants(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total
