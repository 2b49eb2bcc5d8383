"""``chrono bench logs``: execution logs from workers to searchable, with one shipper.

Jobs of ``chrono.bench.log_lines`` (``--lines`` INFO lines of ``--line-bytes`` each) run on one
thread-pool worker (``--pool`` x ``--concurrency``, ``--loglevel INFO``) writing the spool of a
directory of the benchmark's own; one ``chrono indexer --logs-only`` ships it to a data stream
of the benchmark's own (deleted afterwards). Three phases:

1. **lag**: ``--jobs`` jobs due at ``--rate`` per second with the shipper running.
   ``lag_ms`` is, per job, from its last line's ``@timestamp`` (when it was logged) to when the
   benchmark first found that line in the engine (looked up by its document id every 100 ms):
   the spool's flush interval, the shipper's poll and ``_bulk``, and the stream's 1 s refresh.
2. **throughput**: the shipper stopped, ``--backlog-jobs`` jobs run and fill the spool; then
   the shipper starts and ``mb_per_s`` is the ``_bulk`` bytes it sent (documents and their
   action lines) per second from its first batch to the moment the last line was searchable.
3. **worker cost**: ``--cost-jobs`` jobs with the capture on, then the same on a worker with
   ``CHRONO_EXECUTION_LOGS_ENABLED=0``; ``worker_cpu_ms_per_execution`` is the worker process
   tree's CPU time per execution (from /proc), ``on`` and ``off``. Both write their lines to the
   worker's own log file too (the application's logging is unchanged by the capture).

The engine is the one ``chrono services up`` runs, on the same cores as everything else.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from bench.ceilings import reports_ceilings
from bench.common import cpu_by_role, machine, summarize_ms, wait_for_worker
from bench.platform import BenchPlatform, bench_platform
from chronocore.config import get_config
from localservices.processes import ChronoProcess, wait_until
from scheduler import api
from scheduler.clock import ms_to_datetime, now_ms
from search.client import SearchClient
from search.errors import SearchError
from search.log_stream import LogStream, document_id, uninstall

TASK = "chrono.bench.log_lines"
POLL_S = 0.1
_SENT = re.compile(r"log shipper stopped: .*bytes_sent=(\d+)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench logs")
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs of the lag phase")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s of the lag phase")
    parser.add_argument("--backlog-jobs", type=int, default=5_000,
                        help="jobs whose lines fill the spool for the throughput phase")
    parser.add_argument("--cost-jobs", type=int, default=2_000,
                        help="jobs per run of the worker-cost phase (on, then off)")
    parser.add_argument("--lines", type=int, default=20, help="lines each job logs")
    parser.add_argument("--line-bytes", type=int, default=200)
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork"])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0)
    return parser.parse_args(argv)


@reports_ceilings(figure="documents_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    spool = Path(tempfile.mkdtemp(prefix="chrono-bench-logs-spool-"))
    os.environ.update({"CHRONO_AUDIT_NAMESPACE": namespace, "CHRONO_AUDIT_INDEX_REPLICAS": "0",
                       "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(spool)})
    get_config.cache_clear()
    stream = LogStream(namespace)
    client = SearchClient.from_config(get_config())
    try:
        with bench_platform("logs") as platform:
            platform.start_beat("bench-beat-0")
            worker = _start_worker(platform, args, logs_enabled=True)
            shipper = _start_shipper(platform, "shipper-1")
            lag = _lag_phase(platform, client, stream, args)
            shipper.stop()
            throughput = _throughput_phase(platform, client, stream, args)
            cost_on = _cost(platform, worker, args)
            worker.stop()
            worker = _start_worker(platform, args, logs_enabled=False, name="worker-off")
            cost_off = _cost(platform, worker, args)
    finally:
        try:
            uninstall(client, stream)
        except SearchError:
            pass
        client.close()
        shutil.rmtree(spool, ignore_errors=True)
    return {
        "bench": "logs",
        "machine": machine(),
        "worker": f"{args.pool} x{args.concurrency}",
        "lines_per_job": args.lines,
        "line_bytes": args.line_bytes,
        "flush_interval_ms": get_config().execution_log_flush_interval_ms,
        "lag_jobs": args.jobs,
        "lag_rate_per_s": args.rate,
        "lag_ms": summarize_ms(lag["lags"]),
        "lag_lines_missing": lag["missing"],
        "backlog_documents": throughput["documents"],
        "mb_per_s": throughput["mb_per_s"],
        "documents_per_s": throughput["documents_per_s"],
        "worker_cpu_ms_per_execution": {"on": cost_on, "off": cost_off},
    }


def _start_worker(platform: BenchPlatform, args: argparse.Namespace, *, logs_enabled: bool,
                  name: str = "worker") -> ChronoProcess:
    hostname = f"bench-{name}@{platform.queue}"
    worker = platform.group.start(
        name, ["worker", "--queues", platform.queue, "--concurrency", str(args.concurrency),
               "--pool", args.pool, "--hostname", hostname, "--loglevel", "INFO"],
        env={"CHRONO_EXECUTION_LOGS_ENABLED": "1" if logs_enabled else "0"})
    wait_for_worker(worker, hostname)
    return worker


def _start_shipper(platform: BenchPlatform, name: str) -> ChronoProcess:
    shipper = platform.group.start(name, ["indexer", "--logs-only"],
                                   env={"CHRONO_LOG_SHIPPER_POLL_INTERVAL_MS": "50"})
    shipper.wait_until(lambda: "log shipper shipping" in shipper.log_tail(), timeout_s=60,
                       what="starting to ship")
    return shipper


def _schedule(platform: BenchPlatform, jobs: int, rate: float, args: argparse.Namespace) -> None:
    start_ms = now_ms() + 1_000
    step_ms = 1_000.0 / rate
    for offset in range(0, jobs, 10_000):
        fire_times = [ms_to_datetime(start_ms + int(i * step_ms))
                      for i in range(offset, min(jobs, offset + 10_000))]
        api.schedule_once_many(TASK, tenant=platform.tenant, fire_times=fire_times,
                               queue=platform.queue,
                               kwargs={"lines": args.lines, "line_bytes": args.line_bytes})


def _last_line_ids(platform: BenchPlatform, args: argparse.Namespace) -> dict[str, str]:
    """Document id of each finished execution's last line -> the execution."""
    finished = platform.executions.filter(status="SUCCEEDED").values_list("execution_id",
                                                                           "attempt")
    return {document_id(str(e), a, args.lines): str(e) for e, a in finished}


def _lag_phase(platform, client, stream, args) -> dict[str, object]:
    _schedule(platform, args.jobs, args.rate, args)
    seen: dict[str, float] = {}
    lags: list[float] = []
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        wanted = [doc_id for doc_id in _last_line_ids(platform, args) if doc_id not in seen]
        now = time.time()
        for start in range(0, len(wanted), 1_000):
            found = _found(client, stream, wanted[start:start + 1_000])
            for doc_id, logged_ms in found.items():
                seen[doc_id] = now
                lags.append(now * 1000 - logged_ms)
        if len(seen) >= args.jobs:
            break
        time.sleep(POLL_S)
    return {"lags": lags, "missing": args.jobs - len(seen)}


def _found(client: SearchClient, stream: LogStream, ids: list[str]) -> dict[str, float]:
    """Which of ``ids`` are searchable, with when each was logged (epoch ms)."""
    if not ids:
        return {}
    try:
        reply = client.search(stream.name, {"query": {"ids": {"values": ids}},
                                            "size": len(ids), "_source": ["@timestamp"]})
    except SearchError:
        return {}  # the stream is not there yet
    return {hit["_id"]: datetime.fromisoformat(
        hit["_source"]["@timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        for hit in reply["hits"]["hits"]}


def _throughput_phase(platform, client, stream, args) -> dict[str, object]:
    before = platform.executions.filter(status="SUCCEEDED").count()
    _schedule(platform, args.backlog_jobs, 10_000.0, args)
    total = before + args.backlog_jobs
    wait_until(lambda: platform.executions.filter(status="SUCCEEDED").count() >= total,
               timeout_s=args.timeout, interval_s=0.5)
    time.sleep(2 * get_config().execution_log_flush_interval_ms / 1000)  # all flushed
    wanted = list(_last_line_ids(platform, args))
    shipper = _start_shipper(platform, "shipper-2")
    # From its first batch (its start-up, Django's import, is not shipping; it logs the line
    # _start_shipper waits for right before its first batch, at most a poll of 0.1 s ago).
    started = time.monotonic()
    remaining = set(wanted)
    deadline = started + args.timeout
    while remaining and time.monotonic() < deadline:
        batch = list(remaining)[:1_000]
        remaining -= set(_found(client, stream, batch))
        if remaining:
            time.sleep(POLL_S)
    seconds = time.monotonic() - started
    shipper.stop()
    sent = _SENT.findall(shipper.log_tail(50))
    bytes_sent = int(sent[-1]) if sent else 0
    documents = args.backlog_jobs * args.lines
    return {"documents": documents,
            "mb_per_s": round(bytes_sent / 1e6 / seconds, 2) if not remaining else None,
            "documents_per_s": round(documents / seconds) if not remaining else None}


def _cost(platform: BenchPlatform, worker: ChronoProcess, args: argparse.Namespace) -> float:
    done_before = platform.executions.filter(status="SUCCEEDED").count()
    before = cpu_by_role(worker_pid=worker.pid).get("worker", 0.0)
    _schedule(platform, args.cost_jobs, 10_000.0, args)
    wait_until(lambda: platform.executions.filter(status="SUCCEEDED").count()
               >= done_before + args.cost_jobs, timeout_s=args.timeout, interval_s=0.5)
    time.sleep(2 * get_config().execution_log_flush_interval_ms / 1000)  # its flushes too
    after = cpu_by_role(worker_pid=worker.pid).get("worker", 0.0)
    return round((after - before) * 1000 / args.cost_jobs, 3)
