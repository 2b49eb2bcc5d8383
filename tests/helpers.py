"""Small helpers shared by the end-to-end and chaos tests."""

from __future__ import annotations

import os
from collections import Counter
from contextlib import contextmanager

from localservices.processes import wait_until
from tests.e2e.tasks import ATTEMPTS_KEY, DELIVERIES_KEY, DELIVERY_LOG_KEY, RUNS_KEY

FAST_FAILOVER = {
    # Leases of 2 s and ack deadlines of 3 s make a failover take seconds, not a minute.
    "shard_lease_ttl_ms": 2_000,
    "ack_deadline_ms": 3_000,
    "lookahead_ms": 1_000,
    "scan_interval_ms": 200,
}


def wait_for(condition, *, timeout_s: float, interval_s: float = 0.2) -> bool:
    return wait_until(condition, timeout_s=timeout_s, interval_s=interval_s)


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its parent has not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] == "Z"
    except FileNotFoundError:
        return True


def runs(client) -> dict[str, int]:
    """Execution id -> how many times its task body ran."""
    return {k.decode(): int(v) for k, v in client.hgetall(RUNS_KEY).items()}


def deliveries(client) -> dict[str, int]:
    """Execution id -> how many times a worker received it."""
    return {k.decode(): int(v) for k, v in client.hgetall(DELIVERIES_KEY).items()}


def delivery_log(client) -> list[tuple[str, str, int]]:
    """(execution id, shard lease "<replica>|<token>", published ms) per delivery."""
    rows = []
    for raw in client.lrange(DELIVERY_LOG_KEY, 0, -1):
        execution_id, replica, token, published = raw.decode().split("|")
        rows.append((execution_id, f"{replica}|{token}", int(published)))
    return rows


def replicas_seen(client) -> Counter:
    """How many deliveries each beat replica dispatched."""
    return Counter(lease.split("|")[0] for _, lease, _ in delivery_log(client))


def attempts_log(client) -> list[tuple[str, int, int]]:
    """(execution id, attempt, received ms) per delivery, in order."""
    rows = []
    for raw in client.lrange(ATTEMPTS_KEY, 0, -1):
        execution_id, attempt, received = raw.decode().split("|")
        rows.append((execution_id, int(attempt), int(received)))
    return rows



@contextmanager
def process_redis(url: str, *, cluster: bool = False):
    """This test process's Chrono on another Redis (another database, server or cluster) while
    the block runs: REDIS_URL and CHRONO_REDIS_CLUSTER are set, and every cached client and
    config dropped on the way in and out (the Python API, the timer store, the announcements
    then use it as a process started with them would)."""
    from chronocore.config import get_config
    from chronocore.redis_client import redis_client
    from scheduler.timers import timer_store

    saved = {name: os.environ.get(name) for name in ("REDIS_URL", "CHRONO_REDIS_CLUSTER")}

    def forget() -> None:
        get_config.cache_clear()
        redis_client.cache_clear()
        timer_store.cache_clear()

    os.environ["REDIS_URL"] = url
    os.environ["CHRONO_REDIS_CLUSTER"] = "true" if cluster else "false"
    forget()
    try:
        yield redis_client()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        forget()
