"""``chrono bench indexer``: how fast one ``chrono indexer`` ships a backlog of audit events.

Fills the outbox of a database of its own (``chrono_bench_indexer``, migrated here, so a demo's
indexer on the main database neither takes these rows nor sees them) with ``--events`` rows shaped
like the platform's traffic — per one-time job run: job.created, execution.dispatched,
job.completed, execution.started, then execution.succeeded or, one run in twenty,
execution.failed with a Python traceback; every event carries its job type, as the indexer's join
with the jobs table gives it in a deployment — then starts one real indexer process on it and
times the drain from its first shipped row to its last. ``rate_per_s`` is documents indexed per
second, ``mb_per_s`` the JSON documents (the ``_bulk`` bodies) per second in MB (10^6 bytes). The
engine is the one ``chrono services up`` runs (OpenSearch 2.19, one node, on this machine's
cores), into a data stream of the benchmark's own, deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.ceilings import reports_ceilings
from bench.common import ensure_platform_ready, machine, process_group
from chronocore.config import get_config
from localservices.processes import REPO_ROOT
from search.client import SearchClient
from search.documents import OutboxRow, build_document
from search.index_template import AuditStream, uninstall

BENCH_DATABASE = "chrono_bench_indexer"
FAILED_EVERY = 20
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/.venv/lib/python3.11/site-packages/celery/app/trace.py", line 453, in '
    "trace_task\n    R = retval = fun(*args, **kwargs)\n"
    '  File "/srv/app/scheduler/worker.py", line 59, in __call__\n'
    "    result = super().__call__(*args, **kwargs)\n"
    '  File "/srv/app/billing/tasks.py", line 88, in charge_invoice\n'
    "    gateway.charge(invoice.customer.card, invoice.total)\n"
    '  File "/srv/app/billing/gateway.py", line 214, in charge\n'
    "    raise CardDeclined(f\"card {card.last4} declined: {reply['code']}\")\n"
    "billing.gateway.CardDeclined: card 4242 declined: insufficient_funds\n"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench indexer")
    parser.add_argument("--events", type=int, default=300_000, help="outbox rows to ship")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per _bulk request (default: CHRONO_INDEXER_BATCH_SIZE)")
    parser.add_argument("--timeout", type=float, default=600.0)
    return parser.parse_args(argv)


@reports_ceilings(figure="rate_per_s", of="cpu_loops_per_s")
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    ensure_platform_ready()
    database_url = _bench_database()
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    stream = AuditStream(namespace)
    group = process_group("indexer", DATABASE_URL=database_url,
                          CHRONO_AUDIT_NAMESPACE=namespace, CHRONO_AUDIT_INDEX_REPLICAS=0)
    client = SearchClient.from_config(get_config())
    try:
        with psycopg.connect(_dsn(database_url), autocommit=True) as db:
            _empty_outbox(db)
            first_id, last_id = _fill_outbox(db, args.events)
            indexer_argv = ["indexer"]
            if args.batch_size:
                indexer_argv += ["--batch-size", str(args.batch_size)]
            indexer = group.start("indexer", indexer_argv)
            _wait_all_shipped(db, indexer, args.timeout)
            indexer.stop()
            started_at, finished_at, shipped_before = _shipping_times(db)
            documents_bytes = _documents_bytes(db, namespace)
            _empty_outbox(db)
        client.refresh(stream.name)
        indexed = client.count(stream.name)
        seconds = finished_at - started_at
        measured = args.events - shipped_before
        measured_bytes = documents_bytes * measured / args.events
        return {
            "bench": "indexer",
            "rate_per_s": round(measured / seconds, 1),
            "mb_per_s": round(measured_bytes / seconds / 1e6, 2),
            "documents": indexed,
            "duplicates": indexed - args.events,
            "events": args.events,
            "avg_document_bytes": round(documents_bytes / args.events),
            "seconds": round(seconds, 2),
            "batch_size": args.batch_size or get_config().indexer_batch_size,
            "engine": f"{client.engine().engine.value} {client.engine().version}",
            "first_id": first_id,
            "last_id": last_id,
            "machine": machine(),
        }
    finally:
        group.stop_all()
        uninstall(client, stream)
        client.close()


def _bench_database() -> str:
    """The benchmark's own database (created and migrated when needed); its URL."""
    main_url = get_config().database_url
    with psycopg.connect(_dsn(main_url), autocommit=True) as db:
        exists = db.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            [BENCH_DATABASE]).fetchone()
        if not exists:
            db.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
    url = urlunsplit(urlsplit(main_url)._replace(path=f"/{BENCH_DATABASE}"))
    subprocess.run([sys.executable, "-m", "chronoadmin.cli", "migrate", "--noinput", "-v", "0"],
                   cwd=REPO_ROOT, env={**os.environ, "DATABASE_URL": url}, check=True)
    return url


def _dsn(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def _empty_outbox(db: psycopg.Connection) -> None:
    db.execute("TRUNCATE search_auditevent, search_indexerstate RESTART IDENTITY")


def _fill_outbox(db: psycopg.Connection, events: int) -> tuple[int, int]:
    """``events`` rows in the platform's mix, in one statement; (first id, last id)."""
    row = db.execute(
        "INSERT INTO search_auditevent (tenant_id, occurred_at, action, outcome, job_id, "
        "execution_id, actor, message, data) "
        "SELECT tenant, at, action, CASE WHEN action = 'execution.failed' THEN 'failure' "
        "  ELSE 'success' END, job, CASE WHEN action LIKE 'execution.%%' THEN execution END, "
        "  CASE WHEN action LIKE 'execution.s%%' OR action = 'execution.failed' "
        "    THEN 'worker:celery@worker-3.prod' WHEN action = 'job.created' "
        "    THEN 'api-key:4f9a0c2b7e1d' ELSE 'beat' END, '', CASE action "
        "  WHEN 'job.created' THEN jsonb_build_object('job_type', 'billing.charge_invoice', "
        "    'name', 'invoice ' || run, 'queue', 'billing', 'next_run_at', at) "
        "  WHEN 'execution.dispatched' THEN jsonb_build_object('attempt', 1, 'scheduled_for', "
        "    at, 'lateness_ms', 4) "
        "  WHEN 'execution.started' THEN jsonb_build_object('attempt', 1, 'worker_id', "
        "    'celery@worker-3.prod', 'fencing_token', 1, 'scheduled_for', at) "
        "  WHEN 'execution.succeeded' THEN jsonb_build_object('attempt', 1, 'worker_id', "
        "    'celery@worker-3.prod', 'exit_code', 0, 'duration_us', 1000 + run %% 90000) "
        "  WHEN 'execution.failed' THEN jsonb_build_object('attempt', 1, 'worker_id', "
        "    'celery@worker-3.prod', 'exit_code', 1, 'duration_us', 2000 + run %% 90000, "
        "    'error', %s::text) "
        "  ELSE '{}'::jsonb END || jsonb_build_object('job_type', 'billing.charge_invoice') "
        "FROM (SELECT g / 5 AS run, g, (ARRAY['job.created', 'execution.dispatched', "
        "  'job.completed', 'execution.started', CASE WHEN (g / 5) %% %s = 0 "
        "  THEN 'execution.failed' ELSE 'execution.succeeded' END])[g %% 5 + 1] AS action, "
        "  now() - interval '1 hour' + g * interval '1 millisecond' AS at, "
        "  md5((g / 5)::text)::uuid AS job, md5('e' || (g / 5)::text)::uuid AS execution, "
        "  md5('t' || ((g / 5) %% 500)::text)::uuid AS tenant "
        "  FROM generate_series(0, %s - 1) AS g) AS x "
        "RETURNING id",
        [TRACEBACK, FAILED_EVERY, events],
    )
    ids = [r[0] for r in row.fetchall()]
    return min(ids), max(ids)


def _wait_all_shipped(db: psycopg.Connection, indexer, timeout_s: float) -> None:
    # EXISTS on the partial index of unshipped rows: cheap, so polling steals no CPU that the
    # indexer and the engine would use.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not db.execute("SELECT EXISTS (SELECT 1 FROM search_auditevent "
                          "WHERE shipped_at IS NULL)").fetchone()[0]:
            return
        if indexer.popen.poll() is not None:
            raise RuntimeError(f"the indexer exited:\n{indexer.log_tail()}")
        time.sleep(0.5)
    raise RuntimeError(f"the backlog was not shipped in {timeout_s} s:\n{indexer.log_tail()}")


def _shipping_times(db: psycopg.Connection) -> tuple[float, float, int]:
    """From the marks themselves: when the first batch was marked shipped, when the last was, and
    how many rows the first mark covered (shipped before the measured interval began)."""
    first, last = db.execute("SELECT min(shipped_at), max(shipped_at) FROM search_auditevent"
                             ).fetchone()
    in_first = db.execute("SELECT count(*) FROM search_auditevent WHERE shipped_at = %s",
                          [first]).fetchone()[0]
    return first.timestamp(), last.timestamp(), in_first


def _documents_bytes(db: psycopg.Connection, namespace: str) -> int:
    """Bytes of the ``_bulk`` bodies for every row: each document and its action line, as the
    indexer writes them (same document builder, same JSON settings)."""
    total = 0
    rows = db.execute(
        "SELECT a.id, a.occurred_at, a.action, a.outcome, a.tenant_id, a.job_id, "
        "a.execution_id, a.actor, a.message, a.data FROM search_auditevent a ORDER BY a.id")
    for r in rows:
        document = build_document(OutboxRow(
            id=r[0], occurred_at=r[1], action=r[2], outcome=r[3], tenant_id=r[4], job_id=r[5],
            execution_id=r[6], actor=r[7], message=r[8], data=r[9]), namespace=namespace)
        action_line = {"create": {"_id": str(r[0])}}
        total += len(_dumps(action_line)) + len(_dumps(document)) + 2
    return total


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
