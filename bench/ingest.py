"""``chrono bench ingest``: bulk scheduling over HTTP, from request to timers in Redis.

Starts the API under gunicorn (``--web-workers`` sync worker processes), then ``--clients``
client processes POST batches of ``--batch-size`` one-time jobs to ``/api/v1/jobs/bulk`` back to
back for ``--seconds`` (after ``--warmup-s``). A request answers only once its jobs are committed
in PostgreSQL and their timers are in Redis, so jobs acknowledged per second is the ingest rate;
at the end the timers in Redis are counted against the jobs acknowledged. Everything shares this
machine's cores: the clients, gunicorn, PostgreSQL and Redis.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.ceilings import reports_ceilings
from bench.common import ensure_platform_ready, machine, summarize_ms
from bench.platform import clean_up, use_bench_redis_db
from chronocore import grants
from chronocore.models import ApiKey, Tenant
from localservices.processes import REPO_ROOT, ChronoProcess
from scheduler.timers import timer_store

BENCH_TENANT = "bench-ingest"
# Its own Redis database (flushed before and after), not the other benchmarks' one: it counts
# every timer in the database at the end, so another benchmark's flush would read as loss.
INGEST_REDIS_DB = 8
BULK_PATH = "/api/v1/jobs/bulk"
HOUR_MS = 3_600_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench ingest")
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    return parser.parse_args(argv)


def batch_body(batch_size: int, client_index: int) -> bytes:
    """One request's jobs: one-time jobs an hour or more out (none fires during the run)."""
    return orjson.dumps([
        {"job_type": "bench.noop", "delay_ms": HOUR_MS + i, "args": [client_index, i],
         "queue": "bench-ingest"}
        for i in range(batch_size)
    ])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(port: int, workers: int, env: dict[str, str], log_dir: Path) -> ChronoProcess:
    log_path = log_dir / "gunicorn.log"
    with open(log_path, "ab") as log_file:
        popen = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "chronoadmin.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
             "--worker-class", "sync", "--timeout", "120", "--log-level", "warning"],
            cwd=REPO_ROOT, env={**os.environ, **env}, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    return ChronoProcess(name="gunicorn", popen=popen, log_path=log_path)


def post_batch(port: int, body: bytes, api_key: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", BULK_PATH, body=body, headers={
            "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        conn.close()


def client_loop(port: int, api_key: str, batch_size: int, client_index: int,
                start_at: float, stop_at: float, results) -> None:
    """POST batches until ``stop_at``; report (jobs created, latencies in ms) of the requests
    that started after ``start_at`` (the warm-up is not counted)."""
    body = batch_body(batch_size, client_index)
    created_total = created_measured = 0
    latencies: list[float] = []
    errors = 0
    while time.time() < stop_at:
        started = time.time()
        status, answer = post_batch(port, body, api_key)
        finished = time.time()
        if status != 201:
            errors += 1
            continue
        created_total += answer["created"]
        if started >= start_at and finished <= stop_at:
            created_measured += answer["created"]
            latencies.append((finished - started) * 1000)
    results.put((created_total, created_measured, latencies, errors))


def wait_for_web(web: ChronoProcess, port: int, api_key: str) -> None:
    def answers() -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/v1/jobs/?page_size=1",
                         headers={"Authorization": f"Bearer {api_key}"})
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    web.wait_until(answers, timeout_s=60, what="answering HTTP")


@reports_ceilings(figure="rate_per_s", of="copy_rows_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    use_bench_redis_db(INGEST_REDIS_DB)
    ensure_platform_ready()
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT,
                                             defaults={"name": "Ingest benchmark"})
    clean_up(tenant)
    grants.grant(tenant, "*", "*", by="bench")
    _, api_key = ApiKey.objects.issue(tenant=tenant, name="bench ingest")
    port = free_port()
    env = {
        "REDIS_URL": os.environ["REDIS_URL"],
        "CHRONO_API_RATE_PER_MINUTE": "100000000",
        "CHRONO_PENDING_JOBS_QUOTA": "100000000",
        "CHRONO_BULK_MAX_ITEMS": str(max(args.batch_size, 10_000)),
    }
    web = start_web(port, args.web_workers, env,
                    Path(tempfile.mkdtemp(prefix="chrono-bench-ingest-")))
    try:
        wait_for_web(web, port, api_key)
        start_at = time.time() + args.warmup_s
        stop_at = start_at + args.seconds
        results: multiprocessing.Queue = multiprocessing.Queue()
        clients = [
            multiprocessing.Process(target=client_loop, args=(
                port, api_key, args.batch_size, index, start_at, stop_at, results))
            for index in range(args.clients)
        ]
        for client in clients:
            client.start()
        outcomes = [results.get(timeout=args.warmup_s + args.seconds + 300)
                    for _ in clients]
        for client in clients:
            client.join()
        created_total = sum(o[0] for o in outcomes)
        created_measured = sum(o[1] for o in outcomes)
        latencies = [ms for o in outcomes for ms in o[2]]
        timers_in_redis = timer_store().pending_count()
        return {
            "bench": "ingest",
            "rate_per_s": round(created_measured / args.seconds, 1),
            "request_latency_ms": summarize_ms(latencies),
            "batch_size": args.batch_size,
            "clients": args.clients,
            "web_workers": args.web_workers,
            "seconds": args.seconds,
            "jobs_acknowledged": created_total,
            "timers_in_redis": timers_in_redis,
            "lost": created_total - timers_in_redis,
            "failed_requests": sum(o[3] for o in outcomes),
            "machine": machine(),
        }
    finally:
        web.stop()
        ApiKey.objects.filter(tenant=tenant).delete()
        clean_up(tenant)
