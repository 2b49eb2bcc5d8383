"""Real processes for end-to-end tests: beat replicas and Celery workers against the test database.

Tests here use ``transaction=True`` so what they write is committed and visible to the children,
which get the test database's name in ``DATABASE_URL`` and the tests' Redis database.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from chronoadmin.config import get_config
from chronoadmin.processes import ProcessGroup
from scheduler.sharding import shard_tag

pytestmark = pytest.mark.e2e


def owned_shards(client, replica_id: str, shard_count: int) -> int:
    pipe = client.pipeline(transaction=False)
    for shard in range(shard_count):
        pipe.get(f"{shard_tag(shard)}:lease")
    prefix = f"{replica_id}|".encode()
    return sum(1 for value in pipe.execute() if value and value.startswith(prefix))


class Platform:
    """Starts beats and workers for one test and knows when each is ready."""

    def __init__(self, group: ProcessGroup, redis_client, queue: str) -> None:
        self.group = group
        self.redis = redis_client
        self.queue = queue

    def start_beat(self, replica_id: str = "beat-1", **env: str):
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        beat = self.group.start(replica_id, ["beat", "--replica-id", replica_id], env=extra)
        shard_count = get_config().shard_count
        beat.wait_until(
            lambda: owned_shards(self.redis, replica_id, shard_count) > 0,
            timeout_s=30,
            what="taking its shards",
        )
        return beat

    def start_worker(self, name: str = "worker-1", concurrency: int = 2):
        from reaper.models import Worker

        hostname = f"{name}@{self.queue}"
        worker = self.group.start(
            name,
            ["worker", "--queues", self.queue, "--concurrency", str(concurrency),
             "--hostname", hostname, "--include", "tests.e2e.tasks", "--loglevel", "WARNING"],
        )
        worker.wait_until(
            lambda: Worker.objects.filter(worker_id=hostname).exists(),
            timeout_s=60,
            what="its first heartbeat",
        )
        return worker


@pytest.fixture
def platform(transactional_db, redis_client, tmp_path):
    settings = connection.settings_dict
    base = urlsplit(get_config().database_url)
    test_database_url = urlunsplit(base._replace(path=f"/{settings['NAME']}"))
    queue = f"e2e-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={
            "DATABASE_URL": test_database_url,
            "REDIS_URL": os.environ["REDIS_URL"],
            "CHRONO_DEFAULT_QUEUE": queue,
        },
        log_dir=tmp_path / "logs",
    )
    yield Platform(group, redis_client, queue)
    group.stop_all()
    _delete_queue(queue)


def _delete_queue(queue: str) -> None:
    import amqp

    from scheduler.dispatch import amqp_connection_params

    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        conn.channel().queue_delete(queue)
