"""``chrono bench burst``: N cron jobs ``* * * * *`` due in the same second, two minutes running.

The top of the minute is when real schedules fire together (issue 19). The jobs are written by
the bulk path (:func:`scheduler.job_writer.copy`) well before a minute begins; one beat replica
fires them at that minute and the next. Without a worker (the default) every message stays in
the queue, and the benchmark reads them all back at the end: each carries the time the beat
published it (``chrono_published_ms``), so the publish lateness is exact, and a message seen
twice is a duplicate. The jobs' overlap policy is ``allow`` (each minute fires whatever the
last left queued). With ``--worker-pool`` a worker runs them and the start lateness is
reported instead (from the executions table).

Per minute it prints fired vs expected, missed, duplicates, the first and the last publish
after the fire time, publish lateness p50/p99, the publish rate inside the burst, and the
confirm (``dispatched_at``) lateness.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from datetime import datetime, timedelta

from bench.ceilings import reports_ceilings
from bench.common import summarize_ms
from bench.platform import bench_platform, clean_up
from chronocore import grants
from chronocore.config import get_config
from chronocore.models import Tenant
from localservices.processes import wait_until
from scheduler import job_writer, specs
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.dispatch import declare_queue
from scheduler.models import Execution

MINUTE_MS = 60_000
# Jobs are written at least this long before the first minute: the beat scans its look-ahead
# window (2 s) ahead, and the COPY of 10,000 jobs takes under a second.
LEAD_MS = 8_000
CHUNK = 5_000
OTHER_TENANT = "bench-fair"  # the second tenant of --other-tenant-jobs


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench burst")
    parser.add_argument("--jobs", type=int, default=10_000, help="cron jobs due together")
    parser.add_argument("--minutes", type=int, default=2, help="consecutive minutes measured")
    parser.add_argument("--cron", default="* * * * *",
                        help="their expression (one that fires every minute)")
    parser.add_argument("--worker-pool", choices=["threads", "prefork"], default=None,
                        help="run a worker too and report start lateness (default: none, "
                        "the messages are read back from the queue)")
    parser.add_argument("--worker-concurrency", type=int, default=64)
    parser.add_argument("--other-tenant-jobs", type=int, default=0,
                        help="jobs of a second tenant in the same burst on the same queue "
                        "(fairness: with --worker-pool, their start lateness is reported "
                        "apart)")
    parser.add_argument("--probe", action="store_true",
                        help="without a worker: consume the queue while the burst goes out "
                        "(prefetch 256, each message acknowledged as it arrives) and report "
                        "when each tenant's messages were delivered (delivery lateness), to "
                        "tell the broker's part of a start from the worker's")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait after the last minute for every occurrence")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.minutes < 1 or args.other_tenant_jobs < 0:
        parser.error("--jobs and --minutes must be positive, --other-tenant-jobs not negative")
    if args.probe and args.worker_pool:
        parser.error("--probe consumes the queue itself: leave out --worker-pool")
    return args


def _other_tenant() -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=OTHER_TENANT,
                                             defaults={"name": "Benchmarks (fairness)"})
    grants.grant(tenant, "*", "*", by="bench")
    return tenant


def _create_jobs(tenant_id: str, queue: str, jobs: int, cron: str) -> list[str]:
    limits = job_writer.current_limits()
    # overlap_policy allow: with no worker every occurrence stays queued, and the default
    # (skip while the previous one waits or runs) would skip every minute after the first.
    spec = specs.checked_spec({"job_type": "chrono.noop", "cron_expression": cron,
                               "queue": queue, "overlap_policy": "allow"}, limits)
    ids: list[str] = []
    for start in range(0, jobs, CHUNK):
        ids += job_writer.copy(tenant_id, [spec] * min(CHUNK, jobs - start), by="bench")
    return ids


def _first_minute_ms() -> int:
    """The first minute that begins at least ``LEAD_MS`` from now."""
    now = now_ms()
    return (now + LEAD_MS) // MINUTE_MS * MINUTE_MS + MINUTE_MS


def read_back(queue: str) -> list[tuple[str, int, int]]:
    """Every message waiting in ``queue``: (execution id, fire ms, published ms)."""
    import amqp

    from bench.common import broker_connection

    seen: list[tuple[str, int, int]] = []
    with broker_connection() as conn:
        channel = conn.channel()
        channel.basic_qos(0, 1_000, False)

        def on_message(message: amqp.Message) -> None:
            headers = message.application_headers
            seen.append((headers["chrono_execution_id"], int(headers["chrono_fire_ms"]),
                         int(headers["chrono_published_ms"])))

        channel.basic_consume(queue, callback=on_message, no_ack=True)
        while True:
            try:
                conn.drain_events(timeout=1.0)
            except TimeoutError:
                return seen


class Probe(threading.Thread):
    """A consumer like a worker's (prefetch 256, every message acknowledged on arrival) that
    notes when each message was delivered: (execution id, fire ms, published ms, received ms)."""

    def __init__(self, queue: str) -> None:
        super().__init__(name="bench-probe", daemon=True)
        self.queue = queue
        self.seen: list[tuple[str, int, int, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        from bench.common import broker_connection

        with broker_connection() as conn:
            channel = conn.channel()
            declare_queue(channel, self.queue)  # as the beat does before its first publish
            channel.basic_qos(0, 256, False)

            def on_message(message) -> None:
                headers = message.application_headers
                self.seen.append((headers["chrono_execution_id"], int(headers["chrono_fire_ms"]),
                                  int(headers["chrono_published_ms"]), now_ms()))
                channel.basic_ack(message.delivery_tag)

            channel.basic_consume(self.queue, callback=on_message)
            while not self.stopping.is_set():
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    continue


def _minute_report(fire_ms: int, expected: int, messages: list[tuple[str, int, int]],
                   confirmed: list[float], started: list[float] | None) -> dict[str, object]:
    mine = [m for m in messages if m[1] == fire_ms]
    copies = Counter(execution_id for execution_id, _, _ in mine)
    publish = sorted(published - fire_ms for _, _, published in mine)
    span_ms = (publish[-1] - publish[0]) if len(publish) > 1 else 0
    return {
        "fire_at": ms_to_datetime(fire_ms).isoformat(timespec="seconds"),
        "expected": expected,
        "fired": len(copies),
        "missed": expected - len(copies),
        "duplicates": sum(n - 1 for n in copies.values()),
        "first_publish_ms": publish[0] if publish else None,
        "last_publish_ms": publish[-1] if publish else None,
        "publish_lateness_ms": summarize_ms(publish),
        "publish_rate_per_s": round(len(publish) * 1000 / span_ms) if span_ms else None,
        "confirm_lateness_ms": summarize_ms(confirmed),
        "start_lateness_ms": summarize_ms(started) if started is not None else None,
    }


def _start_lateness(rows: list[tuple], at: datetime) -> list[float]:
    return [(started - at) / timedelta(milliseconds=1) for _, started in rows if started]


@reports_ceilings(figure="minutes.0.publish_rate_per_s", of="amqp_publish_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    other = _other_tenant() if args.other_tenant_jobs else None
    with bench_platform("burst") as platform:
        if other is not None:
            clean_up(other)
        platform.start_beat("bench-beat-0")
        if args.worker_pool:
            platform.start_worker(args.worker_concurrency, args.worker_pool)
        probe = Probe(platform.queue) if args.probe else None
        if probe is not None:
            probe.start()
        first_ms = _first_minute_ms()
        created_at = now_ms()
        _create_jobs(str(platform.tenant.tenant_id), platform.queue, args.jobs, args.cron)
        if other is not None:
            _create_jobs(str(other.tenant_id), platform.queue, args.other_tenant_jobs,
                         args.cron)
        create_s = (now_ms() - created_at) / 1000
        minutes = [first_ms + i * MINUTE_MS for i in range(args.minutes)]
        last = ms_to_datetime(minutes[-1])
        field = "started_at" if args.worker_pool else "dispatched_at"
        measured = platform.executions.filter(scheduled_for__gte=ms_to_datetime(first_ms),
                                              scheduled_for__lte=last)
        everyone = Execution.objects.filter(scheduled_for__gte=ms_to_datetime(first_ms),
                                            scheduled_for__lte=last,
                                            tenant_id__in=[platform.tenant.tenant_id]
                                            + ([other.tenant_id] if other else []))
        wait_until(lambda: now_ms() >= minutes[-1], timeout_s=(minutes[-1] - now_ms()) / 1000
                   + 30, interval_s=0.5)
        if probe is not None:
            done = wait_until(
                lambda: len(probe.seen) >= (args.jobs + args.other_tenant_jobs) * args.minutes,
                timeout_s=args.timeout, interval_s=0.5)
        done = done if probe is not None else wait_until(
            lambda: everyone.filter(**{f"{field}__isnull": False}).count()
            >= (args.jobs + args.other_tenant_jobs) * args.minutes, timeout_s=args.timeout,
            interval_s=0.5)
        # Stop the next minute's occurrences before reading back (the clean-up deletes them).
        platform.beats["bench-beat-0"].stop()
        time.sleep(0.5)
        if probe is not None:
            probe.stopping.set()
            probe.join(5)
        received = {execution_id: at_ms for execution_id, _, _, at_ms in probe.seen} \
            if probe is not None else {}
        messages = ([] if args.worker_pool else
                    [seen[:3] for seen in probe.seen] if probe is not None
                    else read_back(platform.queue))
        rows = list(measured.values_list("scheduled_for", "dispatched_at", "started_at"))
        reports = []
        for fire_ms in minutes:
            at = ms_to_datetime(fire_ms)
            mine = [r for r in rows if r[0] == at]
            confirmed = [(r[1] - at) / timedelta(milliseconds=1) for r in mine if r[1]]
            started = ([(r[2] - at) / timedelta(milliseconds=1) for r in mine if r[2]]
                       if args.worker_pool else None)
            expected = args.jobs + args.other_tenant_jobs
            report = _minute_report(fire_ms, expected, messages, confirmed, started)
            if args.worker_pool:  # nothing was read back: count from the executions
                report.update(fired=len(mine), missed=args.jobs - len(mine), duplicates=None)
            if other is not None:
                theirs = list(Execution.objects.for_tenant(other).filter(scheduled_for=at)
                              .values_list("scheduled_for", "started_at", "execution_id"))
                ids = {str(row[2]) for row in theirs}
                report["other_tenant"] = {
                    "jobs": args.other_tenant_jobs, "fired": len(theirs),
                    "start_lateness_ms": summarize_ms(_start_lateness(
                        [row[:2] for row in theirs], at)),
                    # Read back from the queue (no worker): when each went out.
                    "publish_lateness_ms": summarize_ms(sorted(
                        published - fire_ms for execution_id, fired_ms, published in messages
                        if fired_ms == fire_ms and execution_id in ids)) if messages else None,
                }
            if received:
                delivered = {execution_id: at_ms - fire_ms for (execution_id, fired_ms, _), at_ms
                             in ((m, received[m[0]]) for m in messages) if fired_ms == fire_ms}
                report["delivery_lateness_ms"] = summarize_ms(list(delivered.values()))
                if other is not None:
                    report["other_tenant"]["delivery_lateness_ms"] = summarize_ms(
                        [ms for execution_id, ms in delivered.items() if execution_id in ids])
                report["first_tenant_start_lateness_ms"] = summarize_ms(
                    _start_lateness([(r[0], r[2]) for r in mine], at))
            reports.append(report)
        if other is not None:
            clean_up(other)
    return {
        "bench": "burst",
        "jobs": args.jobs,
        "cron": args.cron,
        "worker": f"{args.worker_pool} x{args.worker_concurrency}" if args.worker_pool else None,
        "create_s": round(create_s, 2),
        "minutes": reports,
        "completed_in_time": done,
        "prepare_ahead_ms": get_config().prepare_ahead_ms,
    }
