"""Fixtures of the PostgreSQL failover tests: a primary and its synchronous standby on loopback
(:mod:`localservices.pgcluster`), Chrono's schema migrated on it, and Chrono's processes started
against its multi-host URL.

The pair is the session's (it takes ~2 s to build, and a failover test leaves it failed over:
a test that needs a fresh pair builds one with ``temporary_pair``); its directory is removed at
the end of the session even when a test fails. It listens on ports 5503 and 5504 (the command's
pair takes 5501 and 5502; the settings checks' throwaway servers take 5505 and up).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from chronocore.config import get_config
from localservices.pgcluster import PostgresPair, temporary_pair
from localservices.processes import REPO_ROOT, ChronoProcess, ProcessGroup
from tests.conftest import _delete_queue, owned_shards

PAIR_PORTS = (5503, 5504)


def migrate(database_url: str) -> None:
    """``chrono migrate`` of Chrono's schema on the database ``database_url`` names."""
    result = subprocess.run(
        [sys.executable, "-m", "chronoadmin.cli", "migrate", "--no-input"],
        cwd=REPO_ROOT, env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"migrate failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="session")
def pg_pair(services_up):
    """A migrated primary and synchronous standby; both stopped and removed at the end."""
    pair = temporary_pair(PAIR_PORTS)
    try:
        pair.up()
        migrate(pair.database_url())
        yield pair
    finally:
        pair.down(remove=True)


def query(pair: PostgresPair, statement: str, params: tuple = ()) -> list[tuple]:
    """Rows of ``statement`` on whichever server accepts writes now."""
    with psycopg.connect(pair.database_url(), autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


class PairPlatform:
    """Chrono's processes on the pair's multi-host URL (beat, worker, reaper)."""

    def __init__(self, group: ProcessGroup, pair: PostgresPair, redis, queue: str) -> None:
        self.group = group
        self.pair = pair
        self.redis = redis
        self.queue = queue

    def start_beat(self, replica_id: str = "beat-1", **env: object) -> ChronoProcess:
        beat = self.group.start(replica_id, ["beat", "--replica-id", replica_id],
                                env={f"CHRONO_{k.upper()}": str(v) for k, v in env.items()})
        shard_count = get_config().shard_count
        beat.wait_until(lambda: owned_shards(self.redis, replica_id, shard_count) > 0,
                        timeout_s=30, what="taking its shards")
        return beat

    def start_worker(self, name: str = "worker-1", concurrency: int = 4) -> ChronoProcess:
        hostname = f"{name}@{self.queue}"
        worker = self.group.start(
            name, ["worker", "--queues", self.queue, "--concurrency", str(concurrency),
                   "--pool", "threads", "--hostname", hostname, "--include", "tests.e2e.tasks",
                   "--loglevel", "INFO"])
        worker.wait_until(
            lambda: bool(query(self.pair, "SELECT 1 FROM chrono_worker WHERE worker_id = %s",
                               (hostname,))),
            timeout_s=60, what="its first heartbeat")
        return worker

    def start_reaper(self) -> ChronoProcess:
        reaper = self.group.start("reaper", ["reaper"])
        reaper.wait_until(lambda: "reaper started" in reaper.log_tail(), timeout_s=30,
                          what="starting")
        return reaper

    def start_client(self, out: Path, **options: object) -> ChronoProcess:
        """The Python API client of ``tests/cluster/pg_client.py`` (not a ``chrono``
        command: started with the group's environment by hand)."""
        argv = [sys.executable, "-m", "tests.cluster.pg_client", "--out", str(out),
                "--queue", self.queue]
        for name, value in options.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        log_path = self.group.log_dir / "client.log"
        self.group.log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            popen = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **self.group.env,
                                          "PYTHONUNBUFFERED": "1"})
        client = ChronoProcess(name="client", popen=popen, log_path=log_path)
        self.group.children.append(client)
        return client


@pytest.fixture
def pair_platform(pg_pair, redis_client, tmp_path):
    """Beat, worker and reaper processes (started by the test) on the pair and the tests'
    Redis database, dispatching to a queue of the test's own."""
    queue = f"pgf-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={
            "DATABASE_URL": pg_pair.database_url(),
            "REDIS_URL": os.environ["REDIS_URL"],
            "CHRONO_DEFAULT_QUEUE": queue,
            "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool"),
            # The pair commits synchronously, so the processes start under the production
            # rule: refused on any setting that loses work (chronocore/service_checks.py).
            "CHRONO_SERVICE_CHECKS": "error",
        },
        log_dir=tmp_path / "logs",
    )
    yield PairPlatform(group, pg_pair, redis_client, queue)
    group.stop_all()
    _delete_queue(queue)
