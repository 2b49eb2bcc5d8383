"""Two deployments on two databases of one Redis server never hear each other's announcements.

A Redis pub/sub channel belongs to the server, not to a database, so before the channels were
scoped (scheduler/announcements.py) deployment B's ``chrono:cancel`` stopped deployment A's
running executions of the same ids (a staging deployment restored from production's database
has them all), and every timer B announced reached A's beat. Here both deployments run on a
redis-server of this module's own (port 7110, databases 1 and 2), so no other test session's
announcements on the shared server can mix in: A has a real beat and worker, B is this process
switched to database 2, announcing through Chrono's own code.
"""

from __future__ import annotations

import secrets
import subprocess
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from chronocore.config import get_config
from localservices.processes import ProcessGroup
from scheduler import api, lifecycle
from scheduler.clock import now_ms
from scheduler.models import ExecutionStatus
from scheduler.timers import TimerStore, timer_store
from tests.conftest import Platform, _delete_queue
from tests.e2e.tasks import RUNS_KEY
from tests.helpers import process_redis, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PORT = 7110
PASSWORD = secrets.token_hex(16)
DATABASE_A, DATABASE_B = 1, 2


def _url(database: int) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{PORT}/{database}"


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One redis-server for both deployments, stopped when the module ends."""
    directory = tmp_path_factory.mktemp("announcement-scope")
    server = subprocess.Popen(
        ["redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    admin = redis.Redis(port=PORT, password=PASSWORD, socket_timeout=2)
    try:
        assert wait_for(lambda: _answers(admin, server), timeout_s=10), "redis-server did not start"
        yield admin
    finally:
        admin.close()
        server.terminate()
        server.wait(timeout=10)


def _answers(client: redis.Redis, server: subprocess.Popen) -> bool:
    assert server.poll() is None, f"redis-server on {PORT} exited (port taken?)"
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def deployment_a(shared_server, transactional_db, tmp_path):
    """Deployment A on database 1: this process (its Python API) and the beat and workers the
    test starts."""
    from django.db import connection

    shared_server.flushall()
    base = urlsplit(get_config().database_url)
    queue = f"e2e-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={"DATABASE_URL": urlunsplit(base._replace(path=f"/{connection.settings_dict['NAME']}")),
             "REDIS_URL": _url(DATABASE_A), "CHRONO_DEFAULT_QUEUE": queue,
             "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool")},
        log_dir=tmp_path / "logs",
    )
    with process_redis(_url(DATABASE_A)) as client:
        yield Platform(group, client, queue)
        group.stop_all()
    _delete_queue(queue)


def _running(job) -> object:
    assert wait_for(lambda: job.executions.filter(status="RUNNING").exists(), timeout_s=30)
    return job.executions.get()


def test_a_cancel_announced_by_another_deployment_stops_nothing_here(deployment_a, tenant):
    platform = deployment_a
    with platform.together():
        platform.start_beat()
        # Lease renewals every 40 s: within this test only the announcement can stop a run.
        platform.start_worker(concurrency=2, execution_lease_ttl_ms=120_000)
    keep = api.schedule_once("e2e.sleep", tenant=tenant, kwargs={"seconds": 4}, delay=0.2,
                             queue=platform.queue)
    stop = api.schedule_once("e2e.sleep", tenant=tenant, kwargs={"seconds": 30}, delay=0.2,
                             queue=platform.queue)
    kept, stopped = _running(keep), _running(stop)
    time.sleep(0.5)  # the worker's lease keeper listens by now

    # Deployment B cancels executions of the same ids as A's: B's own announcement, on B's
    # database of the same server.
    with process_redis(_url(DATABASE_B)):
        lifecycle.announce_cancel([str(kept.execution_id), str(stopped.execution_id)])
    # A's own cancellation still reaches A's worker at once.
    assert api.cancel_execution(stopped.execution_id, tenant=tenant, by="ops") == "stopping"

    assert wait_for(lambda: keep.executions.exclude(status="RUNNING").exists(), timeout_s=30)
    kept.refresh_from_db()
    assert kept.status == ExecutionStatus.SUCCEEDED, (kept.status, kept.reason)
    assert int(platform.redis.hget(RUNS_KEY, str(kept.execution_id)) or 0) == 1
    assert wait_for(lambda: stop.executions.filter(status="CANCELLED").exists(), timeout_s=15)
    stopped.refresh_from_db()
    assert (stopped.finished_at - stopped.started_at).total_seconds() < 15


def test_a_timer_announced_by_another_deployment_never_reaches_this_ones_beat(
        deployment_a, shared_server):
    platform = deployment_a
    platform.start_beat()
    assert wait_for(lambda: shared_server.pubsub_channels(), timeout_s=10), "beat not listening"
    listened = {channel.decode() for channel in shared_server.pubsub_channels()}
    spy = shared_server.pubsub()
    spy.psubscribe("*")  # sees every message on the server, whatever its channel
    assert spy.get_message(timeout=2)["type"] == "psubscribe"

    timer_of = {"a": str(uuid.uuid4()), "b": str(uuid.uuid4())}
    soon = now_ms() + 50
    b_client = redis.Redis.from_url(_url(DATABASE_B))
    TimerStore(b_client, shard_count=get_config().shard_count).add(
        [(timer_of["b"], soon)], announce_before_ms=soon + 10_000)
    timer_store().add([(timer_of["a"], soon)], announce_before_ms=soon + 10_000)

    channel_of: dict[str, str] = {}
    deadline = time.monotonic() + 5
    while len(channel_of) < 2 and time.monotonic() < deadline:
        message = spy.get_message(timeout=0.5)
        if message and message["type"] == "pmessage":
            for deployment, timer in timer_of.items():
                if timer in message["data"].decode():
                    channel_of[deployment] = message["channel"].decode()
    spy.close()
    b_client.close()
    assert channel_of.keys() == {"a", "b"}, channel_of
    assert channel_of["a"] in listened, (channel_of, listened)
    assert channel_of["b"] not in listened, (channel_of, listened)
