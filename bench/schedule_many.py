"""``chrono bench schedule-many``: ``api.schedule_many`` against the REST bulk path, in one run.

Three phases, each writing ``--jobs`` jobs in batches of ``--batch-size`` one after the other
(one caller, no concurrency), from the call to the timers in Redis, with the tables emptied of
the benchmark's rows before each:

- ``schedule_many``: one-time jobs with their own args (``delay``, ``args``, ``queue``), the
  shape of the REST items below;
- ``schedule_many_mixed``: a mix of one-time jobs at a time with an idempotency key and cron
  jobs in a time zone with a retry policy, timeouts, jitter, overlap and misfire options (every
  item takes the full rules, none the plain fast path; the keys are looked up first);
- ``rest_bulk``: the same jobs as the first phase POSTed to ``/api/v1/jobs/bulk`` of a gunicorn
  (``--web-workers`` sync workers) by one client, JSON built once per batch before the clock
  starts.

The mixed phase runs first; then, ``--rounds`` times each, the first and the third alternately
(one schedule_many phase, one REST phase, and again), so that what else runs on the shared
cores weighs on both; each phase's figures are the medians of its rounds, and its rates of
every round are listed (``<phase>_rounds_rate_per_s``, ``vs_rest_bulk_rounds``: each round's
ratio). The rates are jobs per second of wall time; ``rate_per_s`` is the first phase's, and
``vs_rest_bulk`` the ratio of the two medians. Everything shares this machine's cores.

How each side is driven: both by this one process, one batch of ``--batch-size`` after the
other, its input built before the clock starts (the dicts of ``schedule_many``'s items; the
REST request bodies as JSON bytes). ``schedule_many`` runs in this process: it converts a
chunk of 1,000 items at a time while the job writer's COPY of the chunk before is open
(``job_writer.copy_streamed``), so PostgreSQL takes in rows while Python converts the next.
The REST bulk view parses and checks a whole request in its web worker, then copies it
(``job_writer.copy``), and answers before the client sends the next: one web worker works at
a time. Timed for each: from the first call to the last answer (the timers are in Redis when
each call returns).

Each phase also reports the CPU seconds it cost (``<phase>_cpu_s``, from /proc, as
:func:`bench.common.cpu_by_role` reads them): this process (``client``: the caller of
``schedule_many``, or the REST client), the web process and its workers (``web``, REST only),
PostgreSQL (every process of the server, the exited backends included: anything else using the
server meanwhile counts too) and Redis; and ``<phase>_jobs_per_cpu_s``, jobs per CPU second of
the client, the web process and PostgreSQL. That is the yardstick when the REST path's work is
spread over more processes than ``schedule_many``'s one: the REST client here sends one request
at a time, so one web worker works at a time whatever ``--web-workers`` says, and the two paths
are the same chain (one Python process, then PostgreSQL) with the same COPY at its end.
``vs_rest_bulk_per_cpu_s`` is the first phase's ratio to the third by that measure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, ensure_platform_ready, machine
from bench.ingest import free_port, post_batch, start_web, wait_for_web
from bench.platform import BENCH_REDIS_DB, clean_up, use_bench_redis_db
from chronocore import grants
from chronocore.models import ApiKey, Tenant
from scheduler import api
from scheduler.misfire import MisfirePolicy
from scheduler.retry import RetryPolicy
from scheduler.timers import timer_store

BENCH_TENANT = "bench-schedule-many"
QUEUE = "bench-schedule-many"
HOUR_MS = 3_600_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench schedule-many")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per phase")
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--web-workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the schedule_many and rest_bulk phases alternately this many "
                             "times each; each figure is the median of its rounds")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    return args


def median_rounds(rounds: list[dict[str, object]]) -> dict[str, object]:
    """One phase's figures over its rounds: each number the median of the rounds' (the CPU
    seconds role by role), and the rates of every round under ``<phase>_rounds_rate_per_s``."""
    first = rounds[0]
    merged: dict[str, object] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            merged[key] = {role: round(statistics.median(r[key][role] for r in rounds), 3)
                           for role in value}
        elif isinstance(value, int | float) or value is None:
            counted = [r[key] for r in rounds if r[key] is not None]  # None: no CPU tick read
            merged[key] = statistics.median(counted) if counted else None
        else:
            merged[key] = value
    rate_key = next(key for key in first if key.endswith("_rate_per_s"))
    merged[rate_key.replace("_rate_per_s", "_rounds_rate_per_s")] = [r[rate_key] for r in rounds]
    return merged


def plain_items(start: int, count: int) -> list[dict]:
    return [{"task_name": "bench.noop", "delay": (HOUR_MS + i) / 1000, "args": [i],
             "queue": QUEUE} for i in range(start, start + count)]


def mixed_items(start: int, count: int, now: datetime) -> list[dict]:
    retry = RetryPolicy(max_attempts=3)
    items = []
    for i in range(start, start + count):
        if i % 2:
            items.append({"task_name": "bench.noop", "at": now + timedelta(hours=1, seconds=i),
                          "args": [i], "kwargs": {"n": i}, "idempotency_key": f"bench-{i}",
                          "queue": QUEUE, "retry": retry, "soft_timeout_ms": 1_000,
                          "hard_timeout_ms": 2_000})
        else:
            items.append({"task_name": "bench.noop", "cron": f"{i % 60} 3 * * *",
                          "timezone": "Europe/Paris", "kwargs": {"n": i}, "queue": QUEUE,
                          "jitter_ms": 1_000, "overlap": "allow",
                          "misfire": MisfirePolicy.SKIP})
    return items


def rest_bodies(jobs: int, batch_size: int) -> list[bytes]:
    return [orjson.dumps([{"job_type": "bench.noop", "delay_ms": HOUR_MS + i, "args": [i],
                           "queue": QUEUE} for i in range(start, min(start + batch_size, jobs))])
            for start in range(0, jobs, batch_size)]


# cpu_by_role's roles, as this benchmark names them ("worker": the web process's tree).
CPU_ROLES = {"bench": "client", "worker": "web", "postgresql": "postgresql", "redis": "redis"}
# The CPU a job costs, by the module docstring's yardstick (Redis does the same for both).
PER_JOB_ROLES = ("client", "web", "postgresql")


def _phase(name: str, tenant: Tenant, batches, call, *, web_pid: int | None = None
           ) -> dict[str, object]:
    """Time ``call(batch)`` over every batch; the jobs it created, the timers in Redis, and
    the CPU seconds of this process, the web process (``web_pid``) and the services."""
    clean_up(tenant)
    created = refused = 0
    cpu_before = cpu_by_role(worker_pid=web_pid)
    started = time.perf_counter()
    for batch in batches:
        made, failed = call(batch)
        created += made
        refused += failed
    seconds = time.perf_counter() - started
    cpu_after = cpu_by_role(worker_pid=web_pid)
    timers = timer_store().pending_count()
    cpu_s = cpu_seconds(cpu_before, cpu_after, web=web_pid is not None)
    return {f"{name}_rate_per_s": round(created / seconds, 1), f"{name}_seconds":
            round(seconds, 3), f"{name}_created": created, f"{name}_refused": refused,
            f"{name}_lost": created - timers, f"{name}_cpu_s": cpu_s,
            f"{name}_jobs_per_cpu_s": jobs_per_cpu_s(created, cpu_s)}


def cpu_seconds(before: dict[str, float], after: dict[str, float], *, web: bool
                ) -> dict[str, float]:
    """The CPU seconds each role spent between two :func:`bench.common.cpu_by_role` readings,
    under this benchmark's names (``web`` only when a web process ran)."""
    return {name: round(after.get(role, 0.0) - before.get(role, 0.0), 3)
            for role, name in CPU_ROLES.items() if web or name != "web"}


def jobs_per_cpu_s(created: int, cpu_s: dict[str, float]) -> float | None:
    """Jobs per CPU second of the client, the web process and PostgreSQL (None: no CPU time
    was counted, which /proc's clock ticks make possible for a tiny run)."""
    spent = sum(cpu_s.get(name, 0.0) for name in PER_JOB_ROLES)
    return round(created / spent, 1) if spent > 0 else None


@reports_ceilings(figure="rate_per_s", of="copy_rows_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    use_bench_redis_db(BENCH_REDIS_DB)
    ensure_platform_ready()
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT,
                                             defaults={"name": "schedule_many benchmark"})
    grants.grant(tenant, "*", "*", by="bench")
    starts = range(0, args.jobs, args.batch_size)
    sizes = [min(args.batch_size, args.jobs - start) for start in starts]

    def schedule(items: list[dict]) -> tuple[int, int]:
        result = api.schedule_many(items, tenant=tenant, by="bench")
        return result.created, result.failed

    result: dict[str, object] = {"bench": "schedule-many", "jobs": args.jobs,
                                 "batch_size": args.batch_size, "rounds": args.rounds}
    # Built before each phase's clock starts, as the REST client's bodies are.
    plain = [plain_items(start, size) for start, size in zip(starts, sizes, strict=True)]
    now = datetime.now(UTC)
    mixed = [mixed_items(start, size, now) for start, size in zip(starts, sizes, strict=True)]
    result |= _phase("schedule_many_mixed", tenant, mixed, schedule)
    del mixed

    _, api_key = ApiKey.objects.issue(tenant=tenant, name="bench schedule-many")
    port = free_port()
    env = {"REDIS_URL": os.environ["REDIS_URL"], "CHRONO_API_RATE_PER_MINUTE": "100000000",
           "CHRONO_PENDING_JOBS_QUOTA": "100000000",
           "CHRONO_BULK_MAX_ITEMS": str(max(args.batch_size, 10_000))}
    web = start_web(port, args.web_workers, env,
                    Path(tempfile.mkdtemp(prefix="chrono-bench-schedule-many-")))

    def post(body: bytes) -> tuple[int, int]:
        status, answer = post_batch(port, body, api_key)
        if status != 201:
            raise RuntimeError(f"bulk POST answered {status}: {str(answer)[:300]}")
        return answer["created"], answer["failed"]

    bodies = rest_bodies(args.jobs, args.batch_size)
    python_rounds: list[dict[str, object]] = []
    rest_rounds: list[dict[str, object]] = []
    try:
        wait_for_web(web, port, api_key)
        # Alternately, so that what else runs on the machine meanwhile weighs on both.
        for _ in range(args.rounds):
            python_rounds.append(_phase("schedule_many", tenant, plain, schedule))
            rest_rounds.append(_phase("rest_bulk", tenant, bodies, post, web_pid=web.pid))
    finally:
        web.stop()
        ApiKey.objects.filter(tenant=tenant).delete()
        clean_up(tenant)
    result |= median_rounds(python_rounds) | median_rounds(rest_rounds)
    result["vs_rest_bulk_rounds"] = [
        round(p["schedule_many_rate_per_s"] / r["rest_bulk_rate_per_s"], 2)
        for p, r in zip(python_rounds, rest_rounds, strict=True)]
    result["rate_per_s"] = result["schedule_many_rate_per_s"]
    result["vs_rest_bulk"] = round(result["schedule_many_rate_per_s"]
                                   / result["rest_bulk_rate_per_s"], 2)
    per_cpu = (result["schedule_many_jobs_per_cpu_s"], result["rest_bulk_jobs_per_cpu_s"])
    result["vs_rest_bulk_per_cpu_s"] = (round(per_cpu[0] / per_cpu[1], 2)
                                        if None not in per_cpu else None)
    result["web_workers"] = args.web_workers
    result["machine"] = machine()
    return result
