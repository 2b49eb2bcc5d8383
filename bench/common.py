"""What every benchmark shares: bringing the platform up, latency summaries, clean-up."""

from __future__ import annotations

import logging
import math
import os
import tempfile
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from chronocore.config import get_config, load_config
from localservices.processes import ChronoProcess, ProcessGroup
from scheduler.sharding import shard_tag

log = logging.getLogger("chrono.bench")


def summarize_ms(values: Sequence[float]) -> dict[str, float] | None:
    """``{"p50", "p95", "p99", "max"}`` of ``values`` (nearest-rank percentiles), in ms."""
    if not values:
        return None
    ordered = sorted(values)

    def rank(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))], 1)

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99),
            "max": round(ordered[-1], 1)}


def ensure_platform_ready() -> None:
    """Services up and schema migrated, as ``make demo`` would leave them."""
    from django.core.management import call_command

    import localservices
    from chronocore.broker_urls import split_broker_urls

    config = get_config()
    if config.redis_cluster or len(split_broker_urls(config.broker_url)) > 1:
        # Against the clusters of `chrono services cluster-up` (issue 20's figures): they are
        # started by that command, which `up` refuses to stand in for; the database and the
        # search engine are the local services, already up.
        log.info("benchmarking against clusters: `chrono services up` not run")
    else:
        localservices.up()
    call_command("migrate", interactive=False, verbosity=0)


def new_queue(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def process_group(name: str, **env: str) -> ProcessGroup:
    log_dir = Path(tempfile.mkdtemp(prefix=f"chrono-bench-{name}-"))
    return ProcessGroup(env={k: str(v) for k, v in env.items()}, log_dir=log_dir)


def wait_for_beat(beat: ChronoProcess, replica_id: str, *, timeout_s: float = 30) -> None:
    from chronocore.redis_client import redis_client

    client = redis_client()
    shards = get_config().shard_count

    def owns_some() -> bool:
        pipe = client.pipeline(transaction=False)
        for shard in range(shards):
            pipe.get(f"{shard_tag(shard)}:lease")
        prefix = f"{replica_id}|".encode()
        return any(v and v.startswith(prefix) for v in pipe.execute())

    beat.wait_until(owns_some, timeout_s=timeout_s, what="taking its shards")


def wait_for_worker(worker: ChronoProcess, hostname: str, *, timeout_s: float = 60) -> None:
    """Until the worker's first heartbeat and, when it runs one, its workflow engine child has
    started: a measurement that began before took the child's start-up (a second of imports,
    ~96 MB) for the work measured."""
    from reaper.models import Worker

    worker.wait_until(lambda: Worker.objects.filter(worker_id=hostname).exists(),
                      timeout_s=timeout_s, what="its first heartbeat")
    if load_config(os.environ).workflow_engine_in_worker:  # the worker's environment
        worker.wait_until(lambda: "workflow engine started" in worker.log_tail(400),
                          timeout_s=timeout_s, what="its workflow engine child")


def broker_connection(broker_url: str | None = None):
    """A connected py-amqp connection to the first node of ``broker_url`` (the configuration's
    by default; a cluster's nodes are tried in turn) that accepts one."""
    from chronocore.broker_urls import split_broker_urls
    from scheduler.dispatch import connect_to_first_node

    return connect_to_first_node(split_broker_urls(broker_url or get_config().broker_url))[1]


def delete_queue(queue: str) -> None:
    with broker_connection() as conn:
        conn.channel().queue_delete(queue)


def machine() -> str:
    return f"{os.cpu_count()} cores"




def queue_depth(queue: str) -> int:
    """Messages waiting in ``queue`` (with no consumer: every message ever published to it)."""
    with broker_connection() as conn:
        _, count, _ = conn.channel().queue_declare(queue, passive=True)
    return count


_TICKS = os.sysconf("SC_CLK_TCK")
# The RabbitMQ node's processes: the Erlang VM and its helper.
RABBITMQ_PROCESSES = ("beam.smp", "erl_child_setup")


def cpu_by_role(
    *, beat_pids: Sequence[int] = (), worker_pid: int | None = None,
    engine_pid: int | None = None,
) -> dict[str, float]:
    """CPU seconds used so far by PostgreSQL, RabbitMQ, Redis, the search engine, beat processes,
    the worker's process tree, a ``chrono workflow-engine`` process and this benchmark process,
    and by the whole machine (``machine``, every core's busy time), from /proc: what each part
    of the platform costs a benchmark."""
    workers = _descendants(worker_pid) if worker_pid else set()
    beats = set(beat_pids)
    totals: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            rest = fields[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        role = ("engine" if pid == engine_pid else "worker" if pid in workers
                else "beat" if pid in beats
                else "bench" if pid == os.getpid()
                else "postgresql" if name.startswith("postgres")
                else "rabbitmq" if name in RABBITMQ_PROCESSES
                else "redis" if name.startswith("redis-server")
                else "search" if name == "java" else None)
        if role:
            # utime + stime + children's, in clock ticks
            totals[role] = totals.get(role, 0.0) + sum(int(v) for v in rest[11:15]) / _TICKS
    # Every core's busy time (all processes, the kernel, interrupts): what the roles leave out.
    busy = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    totals["machine"] = (sum(int(v) for v in busy) - int(busy[3]) - int(busy[4])) / _TICKS
    return totals


def rabbitmq_pids() -> list[int]:
    """The pids of the RabbitMQ node's processes."""
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in RABBITMQ_PROCESSES:
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


@contextmanager
def processes_on_cpus(pids: Sequence[int], cpus: Collection[int]) -> Iterator[None]:
    """Keep every thread of ``pids`` (already running: a service's) on ``cpus`` for the
    block, then let them use every core again."""
    everywhere = set(range(os.cpu_count() or 1))

    def pin(to: Collection[int]) -> None:
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
                try:
                    os.sched_setaffinity(int(task.name), to)
                except (ProcessLookupError, FileNotFoundError):
                    continue

    pin(cpus)
    try:
        yield
    finally:
        pin(everywhere)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, []))
    return found

