"""``chrono bench dashboard``: the dashboard's data endpoint with millions of executions in the
table and a load running.

Set-up: ``--tenants`` tenants of their own (``bench-dash-NN``), each with ``--tasks`` tasks of
its own, ``--jobs`` jobs (COMPLETED one-time jobs, as a platform keeps them) and ``--rows``
executions spread evenly over the last ``--days`` days (minute by minute, so the last hour holds
its share), inserted by COPY (:mod:`chronocore.pgcopy`) in chunks, with the per-minute rollups
of exactly those executions (:mod:`scheduler.rollups`) under their tenants and the platform's;
a few hundred of them RUNNING, DISPATCHED or waiting to retry, as in flight on a live platform.
Then a beat replica and a worker (``threads`` x ``--worker-concurrency``) run one-time no-op
jobs at ``--rate`` per second for ``--duration`` seconds (and ``--warmup`` before), while one
client asks a real ``chrono web`` (gunicorn, ``--web-workers``) for ``/admin/dashboard/data/``
as a signed-in superuser, alternately for the whole platform and for one of the tenants, each
view no more often than the server's cache lasts, so every answer is computed afresh (an
answer the cache gave anyway is counted in ``cache_hits`` and left out of the figures).
A ``chrono reaper`` runs too: it computes the all-tenants figures into the dashboard's snapshot
every ``dashboard_snapshot_interval_ms`` (:mod:`chronoadmin.dashboard_snapshot`), and those of
the tenants viewed in the last minute, so both views are served from snapshots as in
production (``reaper: true``; ``platform_sources`` and ``tenant_sources``: answers by
``source``; ``snapshot_age_s`` and ``tenant_snapshot_age_s``: their snapshots' age); each such
answer read the snapshot afresh (none came from the web's cache) and counts. The tenant's first
answer, before the reaper's next turn, is computed live (in the warm-up).
``snapshot_cost``: the reaper's snapshots over the run, from its ``/metrics``.

Seeding 10 M rows takes ~11-13 min: ``--keep-seed`` leaves them in the database, and a later
``--reuse-seed`` run (same shape) tops them up to now in seconds; ``--seed-only`` seeds and
stops, so the seed is made once, outside a measured run.

Prints ``latency_ms`` (client-side, all answers), ``platform_latency_ms`` and
``tenant_latency_ms``, ``requests``, and the load achieved (``load``: rate and lateness of the
jobs run meanwhile). Everything it inserted is deleted at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import time
import uuid
from datetime import UTC, datetime

from django.db import connection

from bench.ceilings import reports_ceilings
from bench.common import summarize_ms
from bench.platform import bench_platform, lateness_report
from chronocore.pgcopy import NULL, TimestampText, copy_rows
from chronocore.probe import free_port
from localservices.processes import wait_until
from scheduler import rollups
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms

TENANT_PREFIX = "bench-dash-"
TASK_PREFIX = "bench-dash."  # synthetic task names: their rollups are the bench's alone
COPY_CHUNK_ROWS = 200_000
ROLLUP_KEYS_PER_STATEMENT = 1_000
IN_FLIGHT = {"RUNNING": 200, "DISPATCHED": 100, "RETRY_WAIT": 50}
FAILED_SHARE = 0.02
# The in-flight rows' leases and retry times lie beyond any run, so that the reaper the
# benchmark runs (for the dashboard's snapshot) finds none of them lost or overdue meanwhile.
IN_FLIGHT_FOR_MS = 3_600_000
USER = "bench-dashboard"

_JOB_COLUMNS = ("job_id, tenant_id, name, job_type, timezone, status, retry_count, max_retries, "
                "args, kwargs, queue, cancelled_by")
_EXECUTION_COLUMNS = ("execution_id, job_id, tenant_id, attempt, worker_id, scheduled_for, "
                      "dispatched_at, started_at, finished_at, status, error, logs_url, "
                      "fencing_token, lease_expires_at, retry_at")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chrono bench dashboard")
    parser.add_argument("--rows", type=int, default=10_000_000,
                        help="executions in the table during the measurement")
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs they belong to (default: one for every ten executions)")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=10, help="tasks of each tenant")
    parser.add_argument("--days", type=float, default=3.0,
                        help="the executions' time span, ending now")
    parser.add_argument("--rate", type=float, default=1_000.0,
                        help="jobs run per second during the measurement")
    parser.add_argument("--duration", type=float, default=120.0,
                        help="measured seconds (each view is answered about every 1.2 s)")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of load and requests before the measured ones")
    parser.add_argument("--worker-concurrency", type=int, default=64)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--keep-seed", action="store_true",
                        help="leave the seeded tenants, jobs, executions and rollups in the "
                             "database at the end (for a later --reuse-seed)")
    parser.add_argument("--reuse-seed", action="store_true",
                        help="reuse the rows a --keep-seed run of the same --rows, --jobs, "
                             "--tenants, --tasks and --days left (else seed afresh): the "
                             "minutes since are added at the same rate and the in-flight rows "
                             "renewed, in seconds rather than the 10 M rows' ~13 min")
    parser.add_argument("--seed-only", action="store_true",
                        help="seed (or top up a reused seed), keep it, and stop: no load, no "
                             "measurement (implies --keep-seed)")
    args = parser.parse_args(argv)
    args.keep_seed = args.keep_seed or args.seed_only
    if args.rows < 1 or args.tenants < 1 or args.tasks < 1 or args.days <= 0:
        parser.error("--rows, --tenants, --tasks and --days must be positive")
    if args.jobs is None:
        args.jobs = max(args.tenants * args.tasks, args.rows // 10)
    return args


# -- set-up -------------------------------------------------------------------------------


def _leftovers() -> list[uuid.UUID]:
    """The tenants a run that failed before its clean-up left."""
    from chronocore.models import Tenant

    return list(Tenant.objects.filter(slug__startswith=TENANT_PREFIX)
                .values_list("tenant_id", flat=True))


def _tenants(count: int) -> list[uuid.UUID]:
    from chronocore.models import Tenant

    tenants = []
    for i in range(count):
        tenant, _ = Tenant.objects.get_or_create(slug=f"{TENANT_PREFIX}{i:02}",
                                                 defaults={"name": SEEDING})
        tenants.append(tenant.tenant_id)
    return tenants


def _insert_jobs(tenants: list[uuid.UUID], jobs: int, tasks: int) -> dict[uuid.UUID, list[str]]:
    """``jobs`` COMPLETED one-time jobs, evenly over the tenants; their ids by tenant."""
    by_tenant: dict[uuid.UUID, list[str]] = {t: [] for t in tenants}
    lines = []
    for i in range(jobs):
        tenant = tenants[i % len(tenants)]
        job_id = str(uuid.uuid4())
        by_tenant[tenant].append(job_id)
        task = f"{TASK_PREFIX}t{i % len(tenants):02}.task-{(i // len(tenants)) % tasks}"
        lines.append(f"{job_id}\t{tenant}\t\t{task}\tUTC\tCOMPLETED\t0\t0\t[]\t{{}}\t"
                     f"bench-dash\t\n")
        if len(lines) == COPY_CHUNK_ROWS:
            copy_rows(f"COPY chrono_job ({_JOB_COLUMNS}) FROM STDIN", ["".join(lines)])
            lines = []
    if lines:
        copy_rows(f"COPY chrono_job ({_JOB_COLUMNS}) FROM STDIN", ["".join(lines)])
    return by_tenant


class _Executions:
    """Generates the executions minute by minute, their COPY text and their rollup counts."""

    def __init__(self, tenants: list[uuid.UUID], jobs: dict[uuid.UUID, list[str]], tasks: int,
                 seed: int = 13) -> None:
        self.tenants = tenants
        self.jobs = jobs
        self.tasks = tasks
        self.rng = random.Random(seed)
        self.ts = TimestampText()
        self.counts: dict[rollups.RollupKey, rollups.Counts] = {}

    def minute(self, minute_ms: int, per_group: list[int]) -> list[str]:
        """The rows of one minute: ``per_group[g]`` executions of group g (tenant, task)."""
        rng, ts, lines = self.rng, self.ts, []
        for group, n in enumerate(per_group):
            if not n:
                continue
            t = group // self.tasks
            tenant = self.tenants[t]
            task = f"{TASK_PREFIX}t{t:02}.task-{group % self.tasks}"
            counts = self.counts.setdefault((minute_ms, str(tenant), task), rollups.Counts())
            jobs = self.jobs[tenant]
            base_ms = 20 + 40 * (group % self.tasks)  # each task its own typical duration
            for _ in range(n):
                at = minute_ms + rng.randrange(60_000)
                dispatch, start = rng.randrange(1, 8), rng.randrange(3, 40)
                duration = int(rng.expovariate(1 / base_ms)) + 1
                failed = rng.random() < FAILED_SHARE
                lines.append(
                    f"{uuid.uuid4()}\t{rng.choice(jobs)}\t{tenant}\t1\tbench-dash-worker\t"
                    f"{ts(at)}\t{ts(at + dispatch)}\t{ts(at + start)}\t"
                    f"{ts(at + start + duration)}\t{'FAILED' if failed else 'SUCCEEDED'}\t"
                    f"{'ValueError: synthetic' if failed else ''}\t\t0\t{NULL}\t{NULL}\n")
                counts.dispatched += 1
                counts.started += 1
                counts.failed += failed
                counts.succeeded += not failed
                counts.duration_sum_ms += duration
                counts.dispatch_lateness[rollups.bucket_of(dispatch)] += 1
                counts.start_lateness[rollups.bucket_of(start)] += 1
                counts.duration[rollups.bucket_of(duration)] += 1
        return lines

    def in_flight(self, now: int) -> list[str]:
        """What a live platform has in flight: running (leases held), waiting in a queue,
        waiting for a retry."""
        lines = []
        for status, count in IN_FLIGHT.items():
            for i in range(count):
                tenant = self.tenants[i % len(self.tenants)]
                at = now - 5_000
                running = status == "RUNNING"
                lines.append(
                    f"{uuid.uuid4()}\t{self.rng.choice(self.jobs[tenant])}\t{tenant}\t1\t"
                    f"{'bench-dash-worker' if running else NULL}\t{self.ts(at)}\t"
                    f"{self.ts(at + 3) if status != 'RETRY_WAIT' else NULL}\t"
                    f"{self.ts(at + 10) if running else NULL}\t{NULL}\t{status}\t\t\t0\t"
                    f"{self.ts(now + IN_FLIGHT_FOR_MS) if running else NULL}\t"
                    f"{self.ts(now + IN_FLIGHT_FOR_MS) if status == 'RETRY_WAIT' else NULL}\n")
        return lines


def _per_group(rows: int, groups: int) -> list[int]:
    return [rows // groups + (1 if g < rows % groups else 0) for g in range(groups)]


def _in_flight_rows(rows: int) -> int:
    return sum(IN_FLIGHT.values()) if min(sum(IN_FLIGHT.values()), rows // 2) else 0


class _Copier:
    """The executions' COPY, in chunks of :data:`COPY_CHUNK_ROWS`."""

    SQL = f"COPY chrono_execution ({_EXECUTION_COLUMNS}) FROM STDIN"

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.written = 0

    def add(self, lines: list[str]) -> None:
        self.pending += lines
        if len(self.pending) >= COPY_CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            copy_rows(self.SQL, ["".join(self.pending)])
            self.written += len(self.pending)
            self.pending = []


def insert_executions(args: argparse.Namespace, tenants: list[uuid.UUID],
                      jobs: dict[uuid.UUID, list[str]]) -> int:
    """``args.rows`` executions over the last ``args.days`` days and their rollups."""
    now = now_ms()
    last_minute = now - now % 60_000
    minutes = max(1, int(args.days * 24 * 60))
    groups = len(tenants) * args.tasks
    generator = _Executions(tenants, jobs, args.tasks)
    in_flight = _in_flight_rows(args.rows)
    per_minute, extra = divmod(args.rows - in_flight, minutes)
    copier = _Copier()
    if in_flight:
        copier.add(generator.in_flight(now))
    for m in range(minutes):
        rows = per_minute + (1 if m < extra else 0)
        copier.add(generator.minute(last_minute - (minutes - 1 - m) * 60_000,
                                    _per_group(rows, groups)))
        if len(generator.counts) >= ROLLUP_KEYS_PER_STATEMENT * 20:
            _write_rollups(generator.counts)
    copier.flush()
    _write_rollups(generator.counts)
    return copier.written


# -- a kept seed ----------------------------------------------------------------------------
# Seeding 10 M rows takes ~13 min of the two cores; ``--keep-seed`` leaves them, and
# ``--reuse-seed`` finds them by the mark their tenants' name carries (set once the seed is
# complete, so an interrupted one is never reused) and brings them up to date.

SEEDING = "Dashboard benchmark (seeding)"
JOBS_SAMPLE = 10_000  # job ids per tenant the top-up's rows are spread over


def seed_mark(args: argparse.Namespace) -> str:
    return (f"Dashboard benchmark seed: rows={args.rows} jobs={args.jobs} "
            f"tenants={args.tenants} tasks={args.tasks} days={args.days:g}")


def mark_seeded(args: argparse.Namespace, tenants: list[uuid.UUID]) -> None:
    from chronocore.models import Tenant

    Tenant.objects.filter(tenant_id__in=tenants).update(name=seed_mark(args))


def kept_seed(args: argparse.Namespace) -> list[uuid.UUID] | None:
    """The tenants (in slug order) of a complete kept seed of ``args``' shape whose last
    minute lies within ``args.days``, else None."""
    from chronocore.models import Tenant

    found = list(Tenant.objects.filter(slug__startswith=TENANT_PREFIX).order_by("slug")
                 .values_list("tenant_id", "name"))
    if len(found) != args.tenants or any(name != seed_mark(args) for _, name in found):
        return None
    seeded_to = _seeded_to(found[0][0])
    if seeded_to is None or now_ms() - seeded_to > args.days * 86_400_000:
        return None
    return [tenant for tenant, _ in found]


def _seeded_to(tenant: uuid.UUID) -> int | None:
    """The last minute of the seed's rollups (epoch ms), read from the first tenant's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(minute) FROM chrono_execution_rollup "
                       "WHERE tenant_id = %s AND task = %s", [tenant, rollups.ALL_TASKS])
        (minute,) = cursor.fetchone()
    return None if minute is None else datetime_to_ms(minute)


def top_up(args: argparse.Namespace, tenants: list[uuid.UUID]) -> int:
    """Bring a kept seed up to now: the minutes since its last at its rate (so the last hour,
    which the dashboard reads, holds its share), and its in-flight rows renewed (their leases
    and retry times a run ahead again). Returns the executions added."""
    from scheduler.models import Job

    now = now_ms()
    last_minute = now - now % 60_000
    minutes = max(1, int(args.days * 24 * 60))
    per_minute = (args.rows - _in_flight_rows(args.rows)) // minutes
    first_minute = _seeded_to(tenants[0]) + 60_000
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chrono_execution WHERE tenant_id = ANY(%s) "
                       "AND status = ANY(%s)", [tenants, list(IN_FLIGHT)])
        renewed = cursor.rowcount
    jobs = {tenant: [str(j) for j in Job.objects.filter(tenant_id=tenant)
                     .values_list("job_id", flat=True)[:JOBS_SAMPLE]] for tenant in tenants}
    generator = _Executions(tenants, jobs, args.tasks, seed=now)
    copier = _Copier()
    if renewed:
        copier.add(generator.in_flight(now))
    for minute_ms in range(first_minute, last_minute + 1, 60_000):
        copier.add(generator.minute(minute_ms, _per_group(per_minute,
                                                          len(tenants) * args.tasks)))
    copier.flush()
    _write_rollups(generator.counts)
    return copier.written - (sum(IN_FLIGHT.values()) if renewed else 0)


def _write_rollups(counts: dict[rollups.RollupKey, rollups.Counts]) -> None:
    """The counts under their tenants and the platform's (each synthetic task belongs to one
    tenant, so the platform's rows of a task are that tenant's)."""
    keys = list(counts)
    for start in range(0, len(keys), ROLLUP_KEYS_PER_STATEMENT):
        chunk = {k: counts[k] for k in keys[start:start + ROLLUP_KEYS_PER_STATEMENT]}
        rollups.write_counts(rollups.with_platform_totals(chunk))
    counts.clear()


def clean_up(tenants: list[uuid.UUID], days: float = 3.0) -> None:
    """Delete what the set-up inserted (raw deletes: the ORM's cascade would load every id),
    its rollups over the last ``days`` (and one more) included."""
    from django.contrib.auth.models import User

    from chronocore.models import Tenant

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM chrono_execution WHERE tenant_id = ANY(%s)", [tenants])
        cursor.execute("DELETE FROM chrono_job WHERE tenant_id = ANY(%s)", [tenants])
        cursor.execute("DELETE FROM chrono_execution_rollup WHERE starts_with(task, %s) "
                       "OR tenant_id = ANY(%s)", [TASK_PREFIX, tenants])
    # The platform's all-tasks rows held the synthetic tasks' counts too.
    rollups.rebuild_platform_task_totals(now_ms() - int((days + 1) * 86_400_000))
    Tenant.objects.filter(tenant_id__in=tenants).delete()
    User.objects.filter(username=USER).delete()
    with connection.cursor() as cursor:
        for table in ("chrono_execution", "chrono_job", "chrono_execution_rollup"):
            cursor.execute(f"VACUUM ANALYZE {table}")


# -- measurement --------------------------------------------------------------------------


def session_cookie() -> str:
    """A signed-in superuser's session, as the browser of an operator holds it."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user, _ = User.objects.get_or_create(username=USER, defaults={
        "is_staff": True, "is_superuser": True})
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"sessionid={session.session_key}"


class DashboardClient:
    """Asks the data endpoint over one kept-alive HTTP connection; records each answer's
    latency by view, and the answers the server's cache gave (same ``generated_at``)."""

    def __init__(self, port: int, cookie: str, views: list[str], cache_s: float) -> None:
        self.port = port
        self.cookie = cookie
        self.views = views
        self.cache_s = cache_s
        self.latencies: dict[str, list[float]] = {v: [] for v in views}
        self.cache_hits = 0
        self.errors: list[str] = []
        self.sources: dict[str, dict[str, int]] = {v: {} for v in views}
        self.snapshot_ages_s: dict[str, list[float]] = {v: [] for v in views}
        self._generated: dict[str, str] = {}
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def ask(self, view: str) -> None:
        path = "/admin/dashboard/data/" + (f"?tenant={view}" if view != "platform" else "")
        started = time.perf_counter()
        try:
            self._connection.request("GET", path, headers={"Cookie": self.cookie,
                                                           "Accept": "application/json"})
            response = self._connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.errors.append(repr(exc))
            self._connection.close()
            return
        took_ms = (time.perf_counter() - started) * 1000
        if response.status != 200:
            self.errors.append(f"{response.status}: {body[:200]!r}")
            return
        answer = json.loads(body)
        source = answer.get("source", "unmarked")
        self.sources[view][source] = self.sources[view].get(source, 0) + 1
        if source == "snapshot":  # read afresh from Redis for this request, whatever its age
            self.snapshot_ages_s[view].append(answer["age_s"])
            self.latencies[view].append(took_ms)
            return
        generated = answer["generated_at"]
        if self._generated.get(view) == generated:
            self.cache_hits += 1
            return
        self._generated[view] = generated
        self.latencies[view].append(took_ms)

    def run(self, seconds: float) -> None:
        """Each view in turn, each asked again only once its last answer has left the cache
        (its time there and a margin)."""
        deadline = time.monotonic() + seconds
        answered = {view: 0.0 for view in self.views}
        turn = 0
        while time.monotonic() < deadline:
            view = self.views[turn % len(self.views)]
            time.sleep(max(0.0, answered[view] + self.cache_s + 0.2 - time.monotonic()))
            self.ask(view)
            answered[view] = time.monotonic()
            turn += 1

    def reset(self) -> None:
        self.latencies = {v: [] for v in self.views}
        self.cache_hits = 0
        self.errors = []
        self.sources = {v: {} for v in self.views}
        self.snapshot_ages_s = {v: [] for v in self.views}


def _start_web(platform, workers: int) -> int:
    port = free_port()
    web = platform.group.start("web", ["web", f"127.0.0.1:{port}", "--workers", str(workers)])

    def answering() -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/health/live")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    web.wait_until(answering, timeout_s=60, what="answering HTTP")
    return port


def _snapshot_cost(port: int, since: float) -> dict[str, float]:
    """What the reaper's snapshots cost it since it started (``since``, monotonic), from its
    ``/metrics``: how many, their mean and last wall-clock time (waits for PostgreSQL, Redis
    and RabbitMQ included: an upper bound of their CPU time), and the share of the time since
    ``since`` they took."""
    from prometheus_client.parser import text_string_to_metric_families

    probe = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        probe.request("GET", "/metrics")
        text = probe.getresponse().read().decode()
    finally:
        probe.close()
    values = {sample.name: sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples}
    written = values.get("chrono_reaper_dashboard_snapshots_total", 0)
    seconds = values.get("chrono_reaper_dashboard_snapshot_seconds_total", 0.0)
    return {"snapshots": int(written),
            "mean_ms": round(1000 * seconds / written, 1) if written else None,
            "last_ms": round(1000 * values.get("chrono_reaper_dashboard_snapshot_last_seconds",
                                               0.0), 1),
            "last_bytes": int(values.get("chrono_reaper_dashboard_snapshot_last_bytes", 0)),
            "failures": int(values.get("chrono_reaper_dashboard_snapshot_failures_total", 0)),
            "busy_share": round(seconds / (time.monotonic() - since), 4)}


def _summary_s(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"p50": ordered[len(ordered) // 2], "max": ordered[-1]}


def _measure(args: argparse.Namespace, platform) -> tuple:
    """The load and the requests; the client, the snapshot's cost and the load achieved."""
    from chronoadmin.dashboard import DASHBOARD_CACHE_MS

    platform.start_beat("bench-beat-0")
    platform.start_worker(args.worker_concurrency, "threads")
    reaper_port, reaper_since = free_port(), time.monotonic()
    platform.start_reaper(metrics_port=reaper_port)
    port = _start_web(platform, args.web_workers)
    client = DashboardClient(port, session_cookie(), ["platform", f"{TENANT_PREFIX}00"],
                             DASHBOARD_CACHE_MS / 1000)
    total_s = args.warmup + args.duration
    first_ms = platform.schedule_steady(int(args.rate * (total_s + 2)), args.rate,
                                        lead_ms=2_000)
    wait_until(lambda: now_ms() >= first_ms, timeout_s=120, interval_s=0.01)
    client.run(args.warmup)
    client.reset()
    measured_from = ms_to_datetime(now_ms())
    client.run(args.duration)
    measured_to = ms_to_datetime(now_ms())
    snapshot_cost = _snapshot_cost(reaper_port, reaper_since)
    load = lateness_report(platform.executions.filter(
        scheduled_for__gte=measured_from, scheduled_for__lt=measured_to), with_start=True)
    return client, snapshot_cost, load


@reports_ceilings()
def run(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    with bench_platform("dashboard") as platform:
        started = time.monotonic()
        tenants = kept_seed(args) if args.reuse_seed else None
        seed = "reused" if tenants else "new"
        try:
            if tenants:
                rows = args.rows + top_up(args, tenants)
            else:
                clean_up(_leftovers())
                tenants = _tenants(args.tenants)
                jobs = _insert_jobs(tenants, args.jobs, args.tasks)
                rows = insert_executions(args, tenants, jobs)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE chrono_execution")
                cursor.execute("ANALYZE chrono_job")
                cursor.execute("ANALYZE chrono_execution_rollup")
            mark_seeded(args, tenants)
            setup_s = time.monotonic() - started
            if args.seed_only:
                return {"bench": "dashboard", "seed_only": True, "seed": seed, "rows": rows,
                        "setup_s": round(setup_s, 1),
                        "measured_at": datetime.now(UTC).isoformat(timespec="seconds")}
            measured = _measure(args, platform)
        finally:
            if not args.keep_seed:
                clean_up(tenants, args.days)
    client, snapshot_cost, load = measured
    every = [ms for values in client.latencies.values() for ms in values]
    return {
        "bench": "dashboard",
        "rows": rows,
        "jobs": args.jobs,
        "tenants": args.tenants,
        "tasks_per_tenant": args.tasks,
        "days": args.days,
        "offered_rate_per_s": args.rate,
        "duration_s": args.duration,
        "requests": len(every),
        "latency_ms": summarize_ms(every),
        "platform_latency_ms": summarize_ms(client.latencies["platform"]),
        "tenant_latency_ms": summarize_ms(client.latencies[f"{TENANT_PREFIX}00"]),
        "cache_hits": client.cache_hits,
        "reaper": True,
        "platform_sources": client.sources["platform"],
        "tenant_sources": client.sources[f"{TENANT_PREFIX}00"],
        "snapshot_age_s": _summary_s(client.snapshot_ages_s["platform"]),
        "tenant_snapshot_age_s": _summary_s(client.snapshot_ages_s[f"{TENANT_PREFIX}00"]),
        "snapshot_cost": snapshot_cost,
        "errors": client.errors[:5],
        "load": {k: load[k] for k in ("rate_per_s", "start_lateness_ms", "dispatched",
                                      "started")},
        "seed": seed,
        "setup_s": round(setup_s, 1),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }

