"""Fixtures of the PostgreSQL failover tests: a primary and its synchronous standby on loopback
(:mod:`localservices.pgcluster`), Chrono's schema migrated on it, and Chrono's processes started
against its multi-host URL.

The pair is the session's (it takes ~2 s to build, and a failover test leaves it failed over:
a test that needs a fresh pair builds one with ``temporary_pair``); its directory is removed at
the end of the session even when a test fails. It listens on ports 5503 and 5504 (the command's
pair takes 5501 and 5502). Below them, the start-up checks' throwaway servers, each set the
wrong way on purpose (never the shared ones): a PostgreSQL on 5505, a Redis on 5507, a RabbitMQ
node on 5508.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import amqp
import psycopg
import pytest
import redis

from chronocore.config import get_config
from localservices import Endpoint, PostgresService, RabbitMQService, bring_up
from localservices.pgcluster import PostgresPair, temporary_pair
from localservices.processes import REPO_ROOT, ChronoProcess, ProcessGroup, wait_until
from scheduler.dispatch import amqp_connection_params
from tests.conftest import _delete_queue, owned_shards

PAIR_PORTS = (5503, 5504)


def migrate(database_url: str) -> None:
    """``chrono migrate`` of Chrono's schema on the database ``database_url`` names."""
    result = subprocess.run(
        [sys.executable, "-m", "chronoadmin.cli", "migrate", "--no-input"],
        cwd=REPO_ROOT, env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"migrate failed:\n{result.stdout}\n{result.stderr}"


# Each test module names the fixtures it imports, and pytest counts each naming as a fixture of
# its own: the pair is built once for all of them and removed after the last.
_shared_pair: dict[str, object] = {"pair": None, "users": 0}


@pytest.fixture(scope="session")
def pg_pair(services_up):
    """A migrated primary and synchronous standby; both stopped and removed at the end."""
    if _shared_pair["pair"] is None:
        pair = temporary_pair(PAIR_PORTS)
        try:
            pair.up()
            migrate(pair.database_url())
        except BaseException:
            pair.down(remove=True)
            raise
        _shared_pair["pair"] = pair
    _shared_pair["users"] += 1
    try:
        yield _shared_pair["pair"]
    finally:
        _shared_pair["users"] -= 1
        if not _shared_pair["users"]:
            _shared_pair["pair"].down(remove=True)
            _shared_pair["pair"] = None


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


# -- throwaway servers set the wrong way, for the start-up checks ----------------------------

SCRATCH_POSTGRESQL_PORT = 5505
SCRATCH_REDIS_PORT = 5507
SCRATCH_RABBITMQ_PORT = 5508  # its Erlang distribution port: 25508
SCRATCH_RABBITMQ_NODE = "chrono-pgfailover-scratch@localhost"


def _scratch_dir(name: str) -> Path:
    directory = Path(tempfile.mkdtemp(prefix=f"chrono-scratch-{name}-"))
    directory.chmod(0o711)  # the service users reach their data directories, no more
    return directory


@pytest.fixture(scope="session")
def careless_postgresql(services_up):
    """A PostgreSQL of its own (not the shared one) that commits without waiting for the disk
    and runs with fsync and full_page_writes off: its URL. Stopped and removed at the end."""
    base = _scratch_dir("postgresql")
    password = secrets.token_urlsafe(18)
    server = PostgresService(
        endpoint=Endpoint(host="127.0.0.1", port=SCRATCH_POSTGRESQL_PORT, user="chrono",
                          password=password, namespace="chrono"),
        data_dir=base / "data", name="postgresql-scratch",
        extra_settings={"synchronous_commit": "off", "fsync": "off", "full_page_writes": "off"})
    try:
        bring_up(server)
        yield f"postgresql://chrono:{password}@127.0.0.1:{SCRATCH_POSTGRESQL_PORT}/chrono"
    finally:
        if server.running():
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def evicting_redis(services_up):
    """A redis-server of its own that evicts keys when full and keeps no AOF: its URL."""
    base = _scratch_dir("redis")
    password = secrets.token_hex(16)
    server = subprocess.Popen(
        ["redis-server", "--port", str(SCRATCH_REDIS_PORT), "--bind", "127.0.0.1", "--save", "",
         "--requirepass", password, "--appendonly", "no", "--maxmemory", "64mb",
         "--maxmemory-policy", "allkeys-lru", "--dir", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(port=SCRATCH_REDIS_PORT, password=password, socket_timeout=2)
    try:
        assert wait_until(lambda: _pings(client), timeout_s=10), "scratch redis did not start"
        yield f"redis://:{password}@127.0.0.1:{SCRATCH_REDIS_PORT}/0"
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture(scope="session")
def classic_queue_broker(services_up):
    """A RabbitMQ node of its own holding a classic queue named like Chrono's default queue
    (and nothing else of Chrono's): ``(its BROKER_URL, the queue's name)``."""
    base = _scratch_dir("rabbitmq")
    password = secrets.token_urlsafe(18)
    node = RabbitMQService(
        endpoint=Endpoint(host="127.0.0.1", port=SCRATCH_RABBITMQ_PORT, user="chrono",
                          password=password, namespace="/"),
        data_dir=base, name="rabbitmq-scratch", node_name=SCRATCH_RABBITMQ_NODE)
    url = f"amqp://chrono:{password}@127.0.0.1:{SCRATCH_RABBITMQ_PORT}//"
    queue = f"pgf-classic-{uuid.uuid4().hex[:8]}"
    try:
        bring_up(node)
        with amqp.Connection(**amqp_connection_params(url)) as broker:
            broker.connect()
            broker.channel().queue_declare(queue, durable=True, auto_delete=False)
        yield url, queue
    finally:
        if node.running():
            node.stop()
        shutil.rmtree(base, ignore_errors=True)
