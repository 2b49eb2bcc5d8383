"""``chrono bench workflow``: workflow runs through one worker.

Starts, at once, ``--chains`` runs of a 10-step chain, ``--diamonds`` runs of a diamond and one
run of a fan-out of ``--fanout`` no-op instances with a fan-in, all of ``chrono.noop`` steps, with
one beat replica and one worker (``--pool`` x ``--concurrency``, the README's thread-pool
advice by default). Started at once and doing nothing, the runs move in lockstep: a hundred
steps end in the same millisecond and their successors queue behind each other, the worst case
of a handoff. ``--step-ms M`` makes the chain and diamond steps ``chrono.sleep`` for a time
drawn for each step of each run between 0 and 2M ms (a seeded draw, passed in the run's input),
as steps of real runs take: the runs drift apart and a handoff measures the engine, not a
wave's queue. ``--stagger-ms S`` starts the chain and diamond runs one by one over S ms instead
of at once (``--fanout 0`` starts no fan-out run). Reports:

* ``rate_per_s``: steps finished per second, first start to last finish;
* ``handoff_ms``: for every step with parents, its start minus its last parent's finish (the
  engine's end transaction, the child's job and timer, the beat's claim and publish, the
  worker's start);
* ``handoff_stages_ms``: the same split in three: ``engine`` (the parent finished -> the start
  of the transaction that wrote the child's job), ``beat`` (-> its publish confirmed), ``worker``
  (-> started);
* ``fanout_dispatch_ms``: the fan-out's parent finished -> its last instance confirmed
  published;
* ``handoff_label``: which handoff ``handoff_ms`` is: ``lockstep`` (runs started at once,
  no-op steps: every step of a wave ends in the same millisecond), ``staggered`` (no-op steps,
  starts spread) or ``drifting`` (``--step-ms``), with ``runs_in_flight`` (the chain and diamond
  runs' mean number in flight, first start to last end: the sum of their durations over that
  span) and ``cycle_bound_ms`` (Little's law: runs in flight / steps per second, the mean time
  from one step's start to its successor's start that the throughput allows: with no-op steps
  the handoff cannot be shorter, however the runs are started; reported with ``--fanout 0``),
  and ``starts_took_ms`` (how long the bench took to start them, one ``start_run`` after
  another, from ``--start-threads`` threads, or with ``--start-batch`` in one
  ``engine.start_runs`` transaction: runs started "at once" that finish before the last one
  starts are not in flight together);
* ``cpu_ms_per_step``: CPU milliseconds a finished step of each part of the platform (the beat,
  the worker, ``engine``: the worker's engine child, or the process ``--engine-process`` starts,
  PostgreSQL, RabbitMQ, Redis, the bench's own starts and polls, and ``machine``: every core's
  busy time), from the runs' start to their end: what a step costs, and what bounds
  ``rate_per_s`` on a machine whose cores are all busy;
* ``runs``, ``steps``, ``lost`` (steps of runs that did not end in time), ``duplicates``
  (step jobs that fired more than once).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count

from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, summarize_ms
from bench.platform import bench_platform
from localservices.processes import wait_until
from workflows import engine
from workflows.engine_child import engine_children
from workflows.models import WorkflowDefinitionVersion, WorkflowRun, WorkflowTask

CHAIN_LENGTH = 10


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench workflow")
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--diamonds", type=int, default=50)
    parser.add_argument("--fanout", type=int, default=1_000)
    parser.add_argument("--pool", default="threads", choices=["prefork", "threads"])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="mean duration of a chain or diamond step (0: chrono.noop)")
    parser.add_argument("--stagger-ms", type=float, default=0.0,
                        help="start the chain and diamond runs one by one over this many ms "
                             "(0: at once)")
    parser.add_argument("--start-threads", type=int, default=1,
                        help="threads starting the runs (1: one start_run after another, "
                             "as before; more bring the runs closer to all in flight at once)")
    parser.add_argument("--start-batch", action="store_true",
                        help="start the chain and diamond runs with one engine.start_runs call "
                             "(one transaction, their first steps due together): all in "
                             "flight at once")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--engine-process", action="store_true",
                        help="apply step ends in a `chrono workflow-engine` process started "
                             "apart from the worker, instead of the worker's own engine child")
    args = parser.parse_args(argv)
    for name in ("chains", "diamonds", "fanout"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}: must be 0 or more")
    if args.start_threads < 1:
        parser.error("--start-threads: must be 1 or more")
    if args.start_batch and (args.start_threads > 1 or args.stagger_ms > 0):
        parser.error("--start-batch starts every run in one call: not with --start-threads or "
                     "--stagger-ms")
    for name in ("step_ms", "stagger_ms"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be 0 or more")
    return args


def handoff_label(*, step_ms: float, stagger_ms: float) -> str:
    """Which handoff the run measures (see the module's docstring)."""
    if step_ms > 0:
        return "drifting"
    return "staggered" if stagger_ms > 0 else "lockstep"


def in_flight(spans: list[tuple[datetime, datetime]]) -> float | None:
    """The mean number of runs in flight over ``spans`` (start, end): their summed durations
    over the span from the first start to the last end."""
    if not spans:
        return None
    window = max(end for _, end in spans) - min(start for start, _ in spans)
    if window <= timedelta(0):
        return None
    return round(sum(((end - start) for start, end in spans), timedelta(0)) / window, 1)


def cycle_bound_ms(runs_in_flight: float | None, rate_per_s: float | None) -> float | None:
    """Little's law: with ``runs_in_flight`` runs each waiting on one step, at ``rate_per_s``
    steps per second, a step's start follows its parent's start by this many ms on average."""
    if not runs_in_flight or not rate_per_s:
        return None
    return round(1000 * runs_in_flight / rate_per_s, 1)


def _noop(key: str, parents: list[str], **fields: object) -> dict[str, object]:
    return {"key": key, "task": "chrono.noop", "parents": parents, **fields}


def _step(key: str, parents: list[str], sleeps: bool) -> dict[str, object]:
    if not sleeps:
        return _noop(key, parents)
    return {"key": key, "task": "chrono.sleep", "parents": parents,
            "kwargs": {"seconds": {"$ref": f"input.sleep_s.{key}"}}}


def definitions(fanout: int, *, sleeps: bool = False) -> list[dict[str, object]]:
    chain = [_step(f"s{i}", [f"s{i - 1}"] if i else [], sleeps) for i in range(CHAIN_LENGTH)]
    diamond = [_step("a", [], sleeps), _step("b", ["a"], sleeps), _step("c", ["a"], sleeps),
               _step("d", ["b", "c"], sleeps)]
    fan = [_noop("produce", []),
           _noop("each", ["produce"], kind="map", map_over=list(range(fanout)),
                 kwargs={"item": {"$ref": "map.item"}}),
           _noop("total", ["each"], kind="fan_in")]
    return [{"name": "bench-chain", "steps": chain}, {"name": "bench-diamond", "steps": diamond},
            {"name": "bench-fanout", "steps": fan}]


_EDGES_SQL = """
WITH s AS (
  SELECT t.run_id, t.step_key, t.map_index, e.started_at, e.finished_at, e.dispatched_at,
         j.created_at AS written_at
  FROM chrono_workflow_task t JOIN chrono_execution e ON e.job_id = t.job_id
  JOIN chrono_job j ON j.job_id = t.job_id
  WHERE t.run_id = ANY(%s)),
edges AS (
  SELECT child.started_at, child.dispatched_at, child.written_at,
         max(parent.finished_at) AS parent_finished_at
  FROM s child
  JOIN LATERAL jsonb_array_elements_text(%s::jsonb -> child.step_key) AS p(key) ON true
  JOIN s parent ON parent.run_id = child.run_id AND parent.step_key = p.key
  WHERE child.started_at IS NOT NULL
  GROUP BY child.run_id, child.step_key, child.map_index, child.started_at,
           child.dispatched_at, child.written_at
  HAVING bool_and(parent.finished_at IS NOT NULL))
SELECT extract(epoch FROM started_at - parent_finished_at) * 1000,
       extract(epoch FROM written_at - parent_finished_at) * 1000,
       extract(epoch FROM dispatched_at - written_at) * 1000,
       extract(epoch FROM started_at - dispatched_at) * 1000
FROM edges
"""

# The fan-out's parent finished -> its last instance confirmed published; and the parts: ->
# the instances' jobs written (the engine), -> the first instance confirmed.
_FANOUT_SQL = """
WITH produced AS (
  SELECT e.finished_at FROM chrono_workflow_task t
  JOIN chrono_execution e ON e.job_id = t.job_id
  WHERE t.run_id = %s AND t.step_key = 'produce'),
instances AS (
  SELECT max(e.dispatched_at) AS last_at, min(e.dispatched_at) AS first_at,
         max(j.created_at) AS written_at
  FROM chrono_workflow_task t JOIN chrono_execution e ON e.job_id = t.job_id
  JOIN chrono_job j ON j.job_id = t.job_id
  WHERE t.run_id = %s AND t.step_key = 'each')
SELECT i.last_at - p.finished_at, i.written_at - p.finished_at, i.first_at - p.finished_at
FROM produced p, instances i
"""


def _ms_of(span: timedelta | None) -> float | None:
    return None if span is None else round(span / timedelta(milliseconds=1), 1)


def _parents_by_step(specs: list[dict]) -> dict[str, list[str]]:
    parents: dict[str, list[str]] = {}
    for spec in specs:
        for step in spec["steps"]:
            parents.setdefault(step["key"], list(step["parents"]))
    return parents


def _delete_runs(tenant) -> None:
    """The tenant's runs with their step rows (the platform deletes its jobs and executions):
    left behind, a run's 10,000 task rows a fan-out stayed in every later run's tables."""
    runs = WorkflowRun.objects.filter(tenant=tenant)
    WorkflowTask.objects.filter(run_id__in=runs.values("run_id")).delete()
    runs.delete()


@reports_ceilings(figure="rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    specs = definitions(args.fanout, sleeps=args.step_ms > 0)
    with bench_platform("workflow") as platform:
        _delete_runs(platform.tenant)
        WorkflowDefinitionVersion.objects.filter(tenant=platform.tenant).delete()
        beat = platform.start_beat("bench-beat-0")
        engine_process = None
        if args.engine_process:
            os.environ["CHRONO_WORKFLOW_ENGINE_IN_WORKER"] = "false"  # the worker inherits it
            engine_process = platform.group.start("workflow-engine", ["workflow-engine"])
            wait_until(lambda: "workflow engine started" in engine_process.log_tail(),
                       timeout_s=30, interval_s=0.2)
        worker = platform.start_worker(args.concurrency, args.pool)
        # Or the worker's own engine, a child process it started (wait_for_worker waited for it).
        engine_pid = engine_process.pid if engine_process else engine_children(worker.pid)[0]
        pids = {"beat_pids": [beat.pid], "worker_pid": worker.pid, "engine_pid": engine_pid}
        for spec in specs:
            engine.define(platform.tenant, spec)
        draw = random.Random(args.seed)

        def run_input(keys: list[str]) -> dict[str, object] | None:
            if not args.step_ms:
                return None
            return {"sleep_s": {key: round(draw.uniform(0, 2 * args.step_ms) / 1000, 4)
                                for key in keys}}

        chain_keys = [f"s{i}" for i in range(CHAIN_LENGTH)]
        plan = ([("bench-chain", chain_keys)] * args.chains
                + [("bench-diamond", ["a", "b", "c", "d"])] * args.diamonds)
        gap_s = args.stagger_ms / 1000 / len(plan) if plan else 0.0
        inputs = [run_input(keys) for _, keys in plan]  # drawn in order, whatever the threads
        started_at: list[WorkflowRun | None] = [None] * len(plan)

        def start_share(share: int) -> None:
            # One thread's share of the runs, in their planned order; its own connection.
            try:
                for i in range(share, len(plan), args.start_threads):
                    time.sleep(max(0.0, started + i * gap_s - time.monotonic()))
                    started_at[i] = engine.start_run(plan[i][0], tenant=platform.tenant,
                                                     queue=platform.queue, run_input=inputs[i])
            finally:
                connection.close()

        before = cpu_by_role(**pids)
        started = time.monotonic()
        if args.start_batch:
            started_at = list(engine.start_runs(
                [engine.RunRequest(name, run_input=inputs[i], queue=platform.queue)
                 for i, (name, _) in enumerate(plan)], tenant=platform.tenant))
        elif args.start_threads == 1:
            for i, (name, _) in enumerate(plan):
                time.sleep(max(0.0, started + i * gap_s - time.monotonic()))
                started_at[i] = engine.start_run(name, tenant=platform.tenant,
                                                 queue=platform.queue, run_input=inputs[i])
        else:
            with ThreadPoolExecutor(args.start_threads) as pool:
                list(pool.map(start_share, range(args.start_threads)))
        runs = [r for r in started_at if r is not None]
        small_run_ids = [r.run_id for r in runs]
        starts_s = time.monotonic() - started  # "at once" is one start_run after another
        fan = None
        if args.fanout:
            fan = engine.start_run("bench-fanout", tenant=platform.tenant, queue=platform.queue)
            runs.append(fan)
        run_ids = [r.run_id for r in runs]
        finished = WorkflowRun.objects.filter(run_id__in=run_ids, finished_at__isnull=False)
        done = wait_until(lambda: finished.count() == len(runs), timeout_s=args.timeout,
                          interval_s=0.5)
        elapsed = time.monotonic() - started
        after = cpu_by_role(**pids)
        with connection.cursor() as cursor:
            cursor.execute(_EDGES_SQL, [run_ids, json.dumps(_parents_by_step(specs))])
            edges = cursor.fetchall()
            handoffs = [float(row[0]) for row in edges]
            # Where a handoff's time went: the engine (parent finished -> child's job written,
            # its transaction's start), the timer and the beat (written -> publish confirmed),
            # RabbitMQ and the worker (confirmed -> started). Clocks of one machine.
            stages = {name: summarize_ms([float(row[i]) for row in edges if row[i] is not None])
                      for i, name in ((1, "engine"), (2, "beat"), (3, "worker"))}
            cursor.execute(
                "SELECT count(*), min(e.started_at), max(e.finished_at), "
                "count(*) FILTER (WHERE e.finished_at IS NULL) "
                "FROM chrono_workflow_task t JOIN chrono_execution e ON e.job_id = t.job_id "
                "WHERE t.run_id = ANY(%s)", [run_ids])
            steps, first, last, unfinished = cursor.fetchone()
            cursor.execute(
                "SELECT count(*) FROM (SELECT e.job_id FROM chrono_workflow_task t "
                "JOIN chrono_execution e ON e.job_id = t.job_id WHERE t.run_id = ANY(%s) "
                "GROUP BY e.job_id HAVING count(*) > 1) d", [run_ids])
            duplicates = cursor.fetchone()[0]
            fanout_span = fanout_written = fanout_first = None
            if fan is not None:
                cursor.execute(_FANOUT_SQL, [fan.run_id, fan.run_id])
                fanout_span, fanout_written, fanout_first = cursor.fetchone()
        spans = list(WorkflowRun.objects.filter(run_id__in=small_run_ids,
                                                started_at__isnull=False,
                                                finished_at__isnull=False)
                     .values_list("started_at", "finished_at"))
        statuses = dict(WorkflowRun.objects.filter(run_id__in=run_ids).values_list("status")
                        .annotate(n=Count("run_id")).order_by())
        expected = (args.chains * CHAIN_LENGTH + args.diamonds * 4
                    + (args.fanout + 2 if args.fanout else 0))
        _delete_runs(platform.tenant)
    seconds = (last - first).total_seconds() if first and last else 0
    rate = round((steps - unfinished) / seconds, 1) if seconds > 0 else None
    runs_in_flight = in_flight(spans)
    return {
        "bench": "workflow",
        "worker": f"{args.pool} x{args.concurrency}",
        "engine": "own process" if args.engine_process else "the worker's child",
        "runs": len(runs),
        "runs_by_status": statuses,
        "steps": steps,
        "steps_expected": expected,
        "rate_per_s": rate,
        "handoff_label": handoff_label(step_ms=args.step_ms, stagger_ms=args.stagger_ms),
        "handoff_ms": summarize_ms(handoffs),
        "runs_in_flight": runs_in_flight,
        # rate_per_s counts the fan-out's steps too: the bound is the chains' and diamonds' alone
        # only without one.
        "cycle_bound_ms": None if fan is not None else cycle_bound_ms(runs_in_flight, rate),
        "handoff_stages_ms": stages,
        "step_ms": args.step_ms,
        "stagger_ms": args.stagger_ms,
        "starts_took_ms": round(starts_s * 1000, 1),
        "start_threads": args.start_threads,
        "start_batch": args.start_batch,
        "fanout": args.fanout,
        "fanout_dispatch_ms": _ms_of(fanout_span),
        "fanout_stages_ms": {"jobs_written": _ms_of(fanout_written),
                             "first_published": _ms_of(fanout_first)},
        # CPU of each part of the platform a finished step, from the first start to the last
        # run's end (the bench's own: starting the runs and polling for their end).
        "cpu_ms_per_step": {role: round((after[role] - before.get(role, 0)) * 1000
                                        / (steps - unfinished), 3)
                            for role in sorted(after)} if steps - unfinished else None,
        "lost": expected - (steps - unfinished),
        "duplicates": duplicates,
        "completed_in_time": done,
        "elapsed_s": round(elapsed, 1),
    }
