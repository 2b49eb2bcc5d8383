"""``chrono bench heartbeats --workers 5000``: heartbeats of many workers, and their evaluation.

Simulates ``--workers`` workers each heartbeating every ``--interval-ms`` (5,000: 1,000 heartbeats
a second for 5,000 workers) from a pool of client threads, each heartbeat one upsert as a real
worker sends it, while the reaper's evaluation (which workers fell silent) runs every second.
Reports the heartbeat rate achieved, how late heartbeats landed against their schedule
(``lag_ms``), the evaluation's duration, and how many live workers it wrongly declared dead.
"""

from __future__ import annotations

import argparse
import threading
import time

from django.db import connection

from bench.ceilings import reports_ceilings
from bench.common import ensure_platform_ready, summarize_ms
from chronocore.config import get_config
from reaper.models import Worker
from reaper.reaper import Reaper
from scheduler.dispatch import Publisher
from scheduler.heartbeats import beat_heart
from scheduler.timers import timer_store

PREFIX = "bench-hb-"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench heartbeats")
    parser.add_argument("--workers", type=int, default=5_000)
    parser.add_argument("--interval-ms", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=16)
    return parser.parse_args(argv)


def _sender(ids: list[str], interval_s: float, start: float, stop: float, lags: list[float],
            sent: list[int]) -> None:
    offset = interval_s / max(1, len(ids))
    n = 0
    try:
        while True:
            for i, worker_id in enumerate(ids):
                due = start + n * interval_s + i * offset
                if due >= stop:
                    return
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                beat_heart(worker_id, queue_name="bench")
                lags.append((time.monotonic() - due) * 1000)
                sent[0] += 1
            n += 1
    finally:
        connection.close()


@reports_ceilings(figure="rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    ensure_platform_ready()
    Worker.objects.filter(worker_id__startswith=PREFIX).delete()
    interval_s = args.interval_ms / 1000
    ids = [f"{PREFIX}{i}" for i in range(args.workers)]
    for worker_id in ids:  # every worker alive before the clock starts
        beat_heart(worker_id, queue_name="bench")
    config = get_config()
    reaper = Reaper(config=config, publisher=Publisher(config.broker_url), store=timer_store())
    start = time.monotonic() + 0.5
    stop = start + args.seconds
    lags: list[list[float]] = [[] for _ in range(args.threads)]
    sent = [[0] for _ in range(args.threads)]
    threads = [
        threading.Thread(target=_sender, args=(ids[t :: args.threads], interval_s, start, stop,
                                               lags[t], sent[t]))
        for t in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    evaluations, wrongly_dead = [], 0
    while time.monotonic() < stop:
        began = time.monotonic()
        dead = reaper.mark_dead_workers()
        evaluations.append((time.monotonic() - began) * 1000)
        wrongly_dead += sum(1 for worker_id in dead if worker_id.startswith(PREFIX))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    for thread in threads:
        thread.join()
    total = sum(s[0] for s in sent)
    Worker.objects.filter(worker_id__startswith=PREFIX).delete()
    return {
        "bench": "heartbeats",
        "workers": args.workers,
        "interval_ms": args.interval_ms,
        "rate_per_s": round(total / args.seconds, 1),
        "target_rate_per_s": round(args.workers / interval_s, 1),
        "lag_ms": summarize_ms([x for lag in lags for x in lag]),
        "evaluation_ms": summarize_ms(evaluations),
        "wrongly_declared_dead": wrongly_dead,
        "client_threads": args.threads,
    }
