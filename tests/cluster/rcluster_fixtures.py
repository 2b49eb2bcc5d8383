"""Fixtures of the Redis Cluster tests: one real cluster on loopback for the session (three
primaries with a replica each, ports 7101-7106, cluster bus 17101-17106, a short node time-out so
that a failover takes seconds), and Chrono on it: this process (its Python API) and the beats
and workers a test starts, with ``REDIS_URL`` a node of the cluster and ``CHRONO_REDIS_CLUSTER``
on.

The workers record their evidence (``tests/e2e/tasks.py``: runs, deliveries) on the tests' plain
Redis database, not on the cluster a test breaks, so what a failover loses is Chrono's and never
the test's own bookkeeping.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from chronocore.config import get_config
from localservices.processes import ProcessGroup
from localservices.redis_cluster import LocalRedisCluster
from tests.conftest import Platform, _delete_queue
from tests.e2e.tasks import EVIDENCE_URL_VARIABLE
from tests.helpers import process_redis

CLUSTER_PORTS = tuple(range(7101, 7107))
# A node unreachable this long is failed and its replica elected: about 3 s from SIGKILL to
# writes served again on this machine.
NODE_TIMEOUT_MS = 1_500


@pytest.fixture(scope="session")
def redis_cluster(services_up):
    """The session's Redis Cluster; stopped and its directory removed at the end, whatever
    happened (a test that killed a node included)."""
    cluster = LocalRedisCluster(directory=Path(tempfile.mkdtemp(prefix="chrono-rcluster-")),
                                ports=CLUSTER_PORTS, node_timeout_ms=NODE_TIMEOUT_MS)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def healthy_cluster(redis_cluster):
    """The cluster with every node running and every primary's replica in sync, before and
    after the test (a node a test killed is started again: it rejoins as a replica)."""
    _heal(redis_cluster)
    yield redis_cluster
    _heal(redis_cluster)


def _heal(cluster: LocalRedisCluster) -> None:
    for port in cluster.ports:
        cluster.restart_node(port)
    cluster.wait_healthy(60)


class ClusterPlatform(Platform):
    """:class:`tests.conftest.Platform` on the cluster; ``evidence`` is the plain Redis the
    workers record their runs in."""

    def __init__(self, group, cluster_client, queue, *, cluster, evidence) -> None:
        super().__init__(group, cluster_client, queue)
        self.cluster = cluster
        self.evidence = evidence


@pytest.fixture
def cluster_platform(healthy_cluster, transactional_db, tmp_path):
    """Real beats and workers on the Redis Cluster against the test database, with this
    process's Chrono on the cluster too (tests using it are ``transaction=True``)."""
    from django.db import connection

    evidence_url = get_config().redis_url  # the tests' database, password filled in
    evidence = redis.Redis.from_url(evidence_url)
    evidence.flushdb()
    base = urlsplit(get_config().database_url)
    queue = f"e2e-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={
            "DATABASE_URL": urlunsplit(base._replace(path=f"/{connection.settings_dict['NAME']}")),
            "REDIS_URL": healthy_cluster.url,
            "CHRONO_REDIS_CLUSTER": "true",
            "CHRONO_DEFAULT_QUEUE": queue,
            "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool"),
            EVIDENCE_URL_VARIABLE: evidence_url,
        },
        log_dir=tmp_path / "logs",
    )
    with process_redis(healthy_cluster.url, cluster=True) as client:
        client.flushdb()  # every primary's
        try:
            yield ClusterPlatform(group, client, queue, cluster=healthy_cluster,
                                  evidence=evidence)
        finally:
            group.stop_all()
            evidence.flushdb()
            evidence.close()
    _delete_queue(queue)
