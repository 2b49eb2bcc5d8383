"""``chrono bench coalescer``: the CPU a thread-pool worker spends to group its starts and
finishes into shared statements (:class:`scheduler.batching.Coalescer`), in this process.

``--threads`` threads (a ``threads x64`` worker's, by default) each make ``--calls`` pairs of
calls, a start and a finish, to one coalescer whose statement takes ``--statement-ms`` (sleeping,
as a round trip to PostgreSQL waits: the GIL is released). No database, broker or worker: what
is measured is the hand-off alone (the callers' waits, the leader's hand-over, the wake-ups),
which a drain benchmark cannot separate from its ±30 % spread on a shared machine.

Prints ``cpu_us_per_call`` (the process's CPU, user and system, over the calls),
``calls_per_s``, ``items_per_batch``, and the same threads' floor: ``floor_cpu_us_per_wait``,
each call replaced by a sleep of the same length (one wait and one wake of a thread, with the
GIL handed over, and nothing else), so that the coalescer's own cost is the difference.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

from bench.ceilings import reports_ceilings
from scheduler.batching import Coalescer


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench coalescer")
    parser.add_argument("--threads", type=int, default=64,
                        help="calling threads (a threads x64 worker's task threads)")
    parser.add_argument("--calls", type=int, default=600,
                        help="start-and-finish pairs each thread makes")
    parser.add_argument("--statement-ms", type=float, default=0.5,
                        help="how long one coalesced statement takes")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.calls < 1 or args.statement_ms < 0:
        parser.error("--threads and --calls must be at least 1, --statement-ms at least 0")
    return args


def _timed(threads: int, body: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds of ``threads`` threads each running ``body`` once."""
    workers = [threading.Thread(target=body) for _ in range(threads)]
    wall, cpu = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - wall, time.process_time() - cpu


@reports_ceilings(figure="calls_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    statement_s = args.statement_ms / 1000

    def statement(items):
        time.sleep(statement_s)
        return items

    coalescer: Coalescer[int, int] = Coalescer(statement)

    def caller() -> None:
        for n in range(args.calls):
            coalescer.submit(n)  # its start
            coalescer.submit(n)  # its finish

    def sleeper() -> None:
        for _ in range(args.calls * 2):
            time.sleep(statement_s)

    calls = args.threads * args.calls * 2
    wall_s, cpu_s = _timed(args.threads, caller)
    floor_wall_s, floor_cpu_s = _timed(args.threads, sleeper)
    return {
        "bench": "coalescer", "threads": args.threads, "calls": calls,
        "statement_ms": args.statement_ms,
        "calls_per_s": round(calls / wall_s, 1),
        "cpu_us_per_call": round(cpu_s * 1e6 / calls, 2),
        "items_per_batch": round(calls / max(coalescer.batches, 1), 1),
        "floor_cpu_us_per_wait": round(floor_cpu_s * 1e6 / calls, 2),
        "floor_waits_per_s": round(calls / floor_wall_s, 1),
    }
