"""Fixtures of the RabbitMQ cluster tests: three clustered nodes on loopback, and Chrono's
processes (beat, workers, reaper) given the nodes' list as ``BROKER_URL``.

The cluster is session-scoped: three Erlang VMs boot in ~12-15 s on this 2-core machine (the
seed, then the two others joining it at once), so every test of the session shares one cluster
and :func:`rmq_cluster` only restarts the nodes an earlier test killed. It is stopped and its
directory deleted at the end of the session, whatever happened.

Import what you use into a test module: ``from tests.cluster.rmqcluster_fixtures import *``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from chronocore.config import get_config
from localservices.processes import ChronoProcess, ProcessGroup
from localservices.rabbitmq_cluster import RabbitMQCluster
from tests.conftest import owned_shards

__all__ = ["ClusterPlatform", "cluster_platform", "rabbitmq_cluster", "rmq_cluster"]

# The loopback ports this suite's cluster listens on (its Erlang distribution: 25701-25703).
CLUSTER_PORTS = (5701, 5702, 5703)

log = logging.getLogger("tests.cluster")


@pytest.fixture(scope="session")
def rabbitmq_cluster(services_up):
    """Three clustered RabbitMQ nodes for the whole session (``boot_s``: how long they took to
    boot and form the cluster)."""
    directory = Path(tempfile.mkdtemp(prefix="chrono-rmqcluster-"))
    cluster = RabbitMQCluster.create(directory, ports=CLUSTER_PORTS)
    try:
        cluster.start()
        log.warning("rabbitmq cluster booted in %.1f s", cluster.boot_s)
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def rmq_cluster(rabbitmq_cluster):
    """The session's cluster with all its nodes running (a test before may have killed one)."""
    rabbitmq_cluster.restart_dead_nodes()
    return rabbitmq_cluster


class ClusterPlatform:
    """Starts Chrono's processes against the cluster, each with every node in its
    ``BROKER_URL``, node ``first`` first (the node it connects to while that one lives)."""

    def __init__(self, group: ProcessGroup, cluster: RabbitMQCluster, redis_client,
                 queue: str) -> None:
        self.group = group
        self.cluster = cluster
        self.redis = redis_client
        self.queue = queue

    def _env(self, first: int, settings: dict[str, object]) -> dict[str, str]:
        env = {f"CHRONO_{k.upper()}": str(v) for k, v in settings.items()}
        env["BROKER_URL"] = self.cluster.broker_url(first=first)
        return env

    def start_beat(self, replica_id: str = "beat-1", *, first: int = 0,
                   **settings: object) -> ChronoProcess:
        beat = self.group.start(replica_id, ["beat", "--replica-id", replica_id],
                                env=self._env(first, settings))
        shard_count = get_config().shard_count
        beat.wait_until(lambda: owned_shards(self.redis, replica_id, shard_count) > 0,
                        timeout_s=60, what="taking its shards")
        return beat

    def start_worker(self, name: str, *, first: int = 0, concurrency: int = 8,
                     pool: str = "threads", **settings: object) -> ChronoProcess:
        from reaper.models import Worker

        hostname = f"{name}@{self.queue}"
        worker = self.group.start(
            name,
            ["worker", "--queues", self.queue, "--concurrency", str(concurrency),
             "--pool", pool, "--hostname", hostname, "--include", "tests.e2e.tasks",
             "--loglevel", "INFO"],
            env=self._env(first, settings),
        )
        worker.wait_until(lambda: Worker.objects.filter(worker_id=hostname).exists(),
                          timeout_s=90, what="its first heartbeat")
        return worker

    def start_reaper(self, name: str = "reaper", *, first: int = 0,
                     **settings: object) -> ChronoProcess:
        reaper = self.group.start(name, ["reaper"], env=self._env(first, settings))
        reaper.wait_until(lambda: "reaper started" in reaper.log_tail(), timeout_s=60,
                          what="starting")
        return reaper


@pytest.fixture
def cluster_platform(transactional_db, redis_client, rmq_cluster, tmp_path):
    """Real Chrono processes against the test database, the tests' Redis database and the
    RabbitMQ cluster (tests using it must be ``transaction=True``)."""
    from django.db import connection

    base = urlsplit(get_config().database_url)
    database_url = urlunsplit(base._replace(path=f"/{connection.settings_dict['NAME']}"))
    queue = f"rmqc-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={
            "DATABASE_URL": database_url,
            "REDIS_URL": os.environ["REDIS_URL"],
            "CHRONO_DEFAULT_QUEUE": queue,
            "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool"),
        },
        log_dir=tmp_path / "logs",
    )
    started = time.monotonic()
    yield ClusterPlatform(group, rmq_cluster, redis_client, queue)
    group.stop_all()
    log.warning("cluster platform ran %.1f s; logs in %s", time.monotonic() - started,
                tmp_path / "logs")
