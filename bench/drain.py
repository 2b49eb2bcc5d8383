"""``chrono bench drain``: how fast one Celery worker runs and records a backlog of Chrono jobs,
and how fast a plain Celery worker of the same pool and concurrency drains the same backlog.

A beat replica dispatches ``--jobs`` no-op jobs (``chrono.noop``) into the benchmark's queue and
as many (``peers.noop``, the same body) into a second queue of the same kind (a quorum queue
of ``chrono.dispatch``), with no consumer; the beat is stopped. Then Chrono's worker (``--pool``
x ``--concurrency``) drains the first queue, and once it is stopped a plain Celery worker of the
same pool, concurrency and delivery settings (acks late, prefetch; read from Chrono's app) and
no Chrono code drains the second: the peers' worker (``bench/peers_project``, in the peers'
virtualenv of :mod:`bench.peers_env`, whose Celery, kombu and py-amqp are pinned to Chrono's
versions), counting what it ran from Celery's task signals (``peers_drain``). ``--no-plain``
leaves the plain worker out. Reports:

* ``rate_per_s``: executions recorded finished per second, first start to last finish;
* ``plain_rate_per_s``: the plain worker's tasks per second, first start to last finish, and
  ``ratio_to_plain``, Chrono's rate over it (issue 19: at least 0.8);
* ``cpu_ms_per_job``: CPU time per job spent by the worker's processes (its start-up included),
  PostgreSQL and RabbitMQ during the drain (from /proc), which says where a job's cost goes on
  this machine; ``steady_cpu_ms_per_job``: the same from the tenth to the ninetieth percent of
  the jobs finished, what a job costs once the worker is running; ``plain`` holds the plain
  worker's.

``--rounds`` (3) runs both drains that many times, each round on a fresh backlog and emptied
tables, Chrono's worker and the plain one alternated: on this shared VM either worker's rate
moves by half from one minute to the next (the plain threads x64 worker ran 1,290-2,899 jobs/s
over session 28), so one pair says as much about the minute as about the workers. The figures
printed are the round whose ratio to the plain worker is the median (the lower of the two
middle ones for an even count; with ``--no-plain``, the median rate), and ``each_round`` lists
every round's rates, ratio and worker CPU a job.

Start lateness at a given rate is the queueing this rate implies: when jobs arrive faster than
the worker drains them, the backlog (and so the lateness) grows without bound.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import connection
from django.db.models import Count, Max, Min

from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, new_queue, queue_depth
from bench.peers import delete_queue_and_exchange
from bench.peers_env import PeerProcesses, default_venv, ensure_venv, peer_env
from bench.platform import BenchPlatform, bench_platform, clean_up
from localservices.processes import ChronoProcess, wait_until
from scheduler.models import FINISHED_EXECUTION_STATUSES

PLAIN_TASK = "peers.noop"
# The steady window of a drain: between these fractions of its jobs finished.
STEADY_FROM, STEADY_TO = 0.1, 0.9
POLL_S = 0.2
# Chrono's progress is a count in PostgreSQL (15 ms of its CPU for 20,000 executions), read less
# often: the rate comes from the rows' own times, the poll only finds the end and the window.
CHRONO_POLL_S = 1.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench drain")
    parser.add_argument("--jobs", type=int, default=10_000)
    # The worker the README recommends for short jobs at high rates.
    parser.add_argument("--pool", default="threads", choices=["prefork", "threads"])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="drains of each worker, alternated; the median round is printed")
    parser.add_argument("--no-plain", dest="plain", action="store_false",
                        help="leave out the plain Celery worker's drain")
    parser.add_argument("--venv", type=Path, default=None,
                        help="the plain worker's virtualenv (default: the peers', "
                        "<data_dir>/bench-peers)")
    args = parser.parse_args(argv)
    if args.jobs < 10 or args.concurrency < 1 or args.timeout <= 0 or args.rounds < 1:
        parser.error("--jobs must be at least 10, --concurrency, --timeout and --rounds "
                     "positive")
    return args


@dataclass
class Drain:
    """One worker's drain: how many finished, and the CPU per job by role over the whole
    drain and over its steady window (None when it finished too fast to sample one)."""

    finished: int
    completed_in_time: bool
    cpu_ms_per_job: dict[str, float]
    steady_cpu_ms_per_job: dict[str, float] | None


def watch_drain(count: Callable[[], int], jobs: int, worker: ChronoProcess,
                before: dict[str, float], *, timeout_s: float, poll_s: float = POLL_S) -> Drain:
    """Poll ``count`` (jobs finished) until ``jobs`` or ``timeout_s``, sampling the CPU by
    role as it passes :data:`STEADY_FROM` and :data:`STEADY_TO` of them; ``before`` is the
    CPU by role taken before the worker started."""
    deadline = time.monotonic() + timeout_s
    samples: list[tuple[int, dict[str, float]]] = []
    marks = [int(jobs * STEADY_FROM), int(jobs * STEADY_TO)]
    finished = count()
    while finished < jobs and time.monotonic() < deadline:
        if worker.popen.poll() is not None:
            raise RuntimeError(f"{worker.name} exited: {worker.log_tail(15)}")
        if marks and finished >= marks[0]:
            samples.append((finished, cpu_by_role(worker_pid=worker.pid)))
            while marks and finished >= marks[0]:
                marks.pop(0)
        time.sleep(poll_s)
        finished = count()
    after = cpu_by_role(worker_pid=worker.pid)
    if len(samples) == 1:  # it passed the last mark between two polls: the end is the mark
        samples.append((finished, after))
    steady = None
    if len(samples) == 2 and samples[1][0] > samples[0][0]:
        steady = per_job(samples[0][1], samples[1][1], samples[1][0] - samples[0][0])
    return Drain(finished, finished >= jobs, per_job(before, after, finished), steady)


def per_job(before: dict[str, float], after: dict[str, float], jobs: int) -> dict[str, float]:
    return {role: round((after.get(role, 0) - before.get(role, 0)) * 1000 / max(jobs, 1), 3)
            for role in sorted(set(after) | set(before))}


@reports_ceilings(figure="rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    python = ensure_venv(args.venv or default_venv()) if args.plain else None
    rounds: list[dict[str, object]] = []
    with bench_platform("drain") as platform:
        plain_queue = new_queue("bench-drain-plain") if args.plain else None
        try:
            for index in range(args.rounds):
                if index:
                    clean_up(platform.tenant)
                queued = _dispatch(platform, args.jobs, plain_queue)
                result = {"queued": queued, **_chrono_drain(platform, args)}
                platform.worker.stop()  # type: ignore[union-attr]
                if python is not None and plain_queue is not None:
                    plain = _plain_drain(platform, python, plain_queue, args)
                    result.update(_compared(result["rate_per_s"], plain))
                rounds.append(result)
        finally:
            if plain_queue is not None:
                delete_queue_and_exchange(plain_queue)
    return {"bench": "drain", "jobs": args.jobs, "worker": f"{args.pool} x{args.concurrency}",
            "rounds": len(rounds), **median_round(rounds)}


def median_round(rounds: list[dict[str, object]]) -> dict[str, object]:
    """The round whose ratio to the plain worker (its rate, without one) is the median, the
    lower middle one of an even count, with every round's figures in ``each_round``."""
    key = ("ratio_to_plain" if all(isinstance(r.get("ratio_to_plain"), float) for r in rounds)
           else "rate_per_s")

    def figure(round_: dict[str, object]) -> float:
        value = round_.get(key)
        return value if isinstance(value, float) else 0.0  # no rate: it ran nothing

    chosen = sorted(rounds, key=figure)[(len(rounds) - 1) // 2]
    each = [{"rate_per_s": r.get("rate_per_s"), "plain_rate_per_s": r.get("plain_rate_per_s"),
             "ratio_to_plain": r.get("ratio_to_plain"),
             "worker_cpu_ms_per_job": (r.get("steady_cpu_ms_per_job") or {}).get("worker")}
            for r in rounds]
    return {**chosen, "median_of": key, "each_round": each}


def _dispatch(platform: BenchPlatform, jobs: int, plain_queue: str | None) -> int:
    """Chrono's backlog (and the plain worker's) published by a beat that is then stopped;
    the depth of Chrono's queue."""
    platform.start_beat("bench-beat-0")
    platform.schedule_steady(jobs, rate=5_000.0, lead_ms=1_000)
    total = jobs
    if plain_queue is not None:
        platform.schedule_steady(jobs, rate=5_000.0, lead_ms=1_000, task=PLAIN_TASK,
                                 queue=plain_queue)
        total += jobs
    wait_until(lambda: platform.executions.filter(dispatched_at__isnull=False).count()
               >= total, timeout_s=30 + total / 1_000, interval_s=0.5)
    platform.beats.pop("bench-beat-0").stop()
    return _depth(platform.queue)


def _chrono_drain(platform: BenchPlatform, args: argparse.Namespace) -> dict[str, object]:
    ours = platform.executions.filter(job__job_type="chrono.noop")
    # Progress is read from the tenant's status index alone: the plain worker's executions
    # stay DISPATCHED (it records nothing), so the tenant's finished ones are Chrono's. A count
    # joined to the jobs, five times a second, cost PostgreSQL 30 ms a poll: a sixth of a core
    # the plain worker's side (its progress read from files) did not pay.
    finished = platform.executions.filter(status__in=FINISHED_EXECUTION_STATUSES)
    before = cpu_by_role()
    worker = platform.start_worker(args.concurrency, args.pool)
    drain = watch_drain(finished.count, args.jobs, worker, before, timeout_s=args.timeout,
                        poll_s=CHRONO_POLL_S)
    # Statistics made now: planned on those of an emptier table (the previous run's rows
    # deleted, autovacuum not yet round), the join below ran a nested loop for minutes.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE chrono_job, chrono_execution")
    span = ours.aggregate(first=Min("started_at"), last=Max("finished_at"))
    statuses = dict(ours.values_list("status").annotate(n=Count("pk")))
    seconds = (span["last"] - span["first"]).total_seconds() if span["last"] else 0
    return {
        "finished": drain.finished,
        "rate_per_s": round(drain.finished / seconds, 1) if seconds > 0 else None,
        "cpu_ms_per_job": drain.cpu_ms_per_job,
        "steady_cpu_ms_per_job": drain.steady_cpu_ms_per_job,
        "statuses": statuses,
        "completed_in_time": drain.completed_in_time,
    }


def _plain_drain(platform: BenchPlatform, python: Path, queue: str,
                 args: argparse.Namespace) -> dict[str, object]:
    from chronoadmin.celery import app

    stats = Path(tempfile.mkdtemp(dir=platform.group.log_dir, prefix="plain-drain-"))
    peers = PeerProcesses(python, platform.group, peer_env(queue))
    queued = _depth(queue)
    before = cpu_by_role()
    worker = peers.worker(
        queue, queue_type="quorum", pool=args.pool, concurrency=args.concurrency,
        PEERS_ACKS_LATE="1" if app.conf.task_acks_late else "0",
        PEERS_PREFETCH_MULTIPLIER=str(app.conf.worker_prefetch_multiplier),
        PEERS_DRAIN_STATS=str(stats))
    drain = watch_drain(lambda: plain_counts(stats)[0], args.jobs, worker, before,
                        timeout_s=args.timeout)
    worker.stop()
    finished, first_ns, last_ns = plain_counts(stats)
    seconds = (last_ns - first_ns) / 1e9
    return {"queued": queued, "finished": finished,
            "rate_per_s": round(finished / seconds, 1) if seconds > 0 else None,
            "cpu_ms_per_job": drain.cpu_ms_per_job,
            "steady_cpu_ms_per_job": drain.steady_cpu_ms_per_job,
            "completed_in_time": drain.completed_in_time, "logs": str(platform.group.log_dir)}


def plain_counts(stats: Path) -> tuple[int, int, int]:
    """The plain worker's processes' counts summed: tasks run, the first start and the last
    finish (ns) over all of them (``peers_drain``'s files)."""
    count, first, last = 0, 0, 0
    for path in stats.iterdir():
        if path.suffix == ".tmp":
            continue
        n, started, finished = (int(v) for v in path.read_text().split())
        count += n
        first = started if not first else min(first, started)
        last = max(last, finished)
    return count, first, last


def _compared(rate: object, plain: dict[str, object]) -> dict[str, object]:
    plain_rate = plain["rate_per_s"]
    ratio = (round(rate / plain_rate, 3)  # type: ignore[operator]
             if isinstance(rate, float) and isinstance(plain_rate, float) else None)
    return {"plain_rate_per_s": plain_rate, "ratio_to_plain": ratio, "plain": plain}


def _depth(queue: str) -> int:
    import amqp

    try:
        return queue_depth(queue)
    except amqp.NotFound:  # declared by the beat's first publish
        return 0
