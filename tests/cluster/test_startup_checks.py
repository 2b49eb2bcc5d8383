"""Chrono's processes check the settings of the services they depend on when they start, on
throwaway servers set the wrong way (never the shared ones): with ``CHRONO_SERVICE_CHECKS=error``
(the production settings' default) beat, worker, reaper and web refuse to start, naming the
setting and what to change; with ``warn`` (the development default) they log it and start.

The other services of each process are sound (the failover pair's PostgreSQL, which commits
synchronously; the suite's Redis and RabbitMQ), so that what a refusal names is the one server
set the wrong way.
"""

from __future__ import annotations

import os
import uuid

import pytest

from localservices.processes import ChronoProcess, ProcessGroup
from tests.cluster import pgfailover_fixtures
from tests.cluster.pgfailover_fixtures import (
    SCRATCH_POSTGRESQL_PORT,
    SCRATCH_RABBITMQ_PORT,
    SCRATCH_REDIS_PORT,
)

pytestmark = [pytest.mark.e2e]
pg_pair = pgfailover_fixtures.pg_pair
careless_postgresql = pgfailover_fixtures.careless_postgresql
evicting_redis = pgfailover_fixtures.evicting_redis
classic_queue_broker = pgfailover_fixtures.classic_queue_broker

EXIT_TIMEOUT_S = 90


@pytest.fixture
def group(tmp_path, pg_pair):
    group = ProcessGroup(
        env={
            "DATABASE_URL": pg_pair.database_url(),
            "REDIS_URL": os.environ["REDIS_URL"],
            "CHRONO_DEFAULT_QUEUE": f"pgf-checks-{uuid.uuid4().hex[:8]}",
            "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool"),
            "CHRONO_SERVICE_CHECKS": "error",
        },
        log_dir=tmp_path / "logs",
    )
    yield group
    group.stop_all()


def refused(process: ChronoProcess) -> str:
    """The log of ``process``, once it exited non-zero (it must not start)."""
    code = process.popen.wait(EXIT_TIMEOUT_S)
    log = process.log_path.read_text()
    assert code != 0, f"{process.name} started:\n{log}"
    assert f"chrono {process.name} refuses to start" in log, log
    return log


WORKER = ["worker", "--queues", "pgf-checks", "--pool", "threads", "--concurrency", "1"]


def test_beat_refuses_a_postgresql_that_loses_commits_naming_each_setting(group,
                                                                         careless_postgresql):
    log = refused(group.start("beat", ["beat"], env={"DATABASE_URL": careless_postgresql}))
    where = f"PostgreSQL at 127.0.0.1:{SCRATCH_POSTGRESQL_PORT}"
    assert f"(chrono.E006) {where} runs with synchronous_commit off" in log
    assert "HINT: Set `synchronous_commit = on` in postgresql.conf" in log
    assert f"(chrono.E007) {where} runs with fsync off" in log
    assert f"(chrono.E007) {where} runs with full_page_writes off" in log
    assert "beat replica" not in log, "the beat ran before the check"


def test_in_warn_mode_the_reaper_starts_and_logs_what_to_change(group, careless_postgresql):
    reaper = group.start("reaper", ["reaper"], env={"DATABASE_URL": careless_postgresql,
                                                    "CHRONO_SERVICE_CHECKS": "warn"})
    reaper.wait_until(lambda: "reaper started" in reaper.log_tail(200), timeout_s=60,
                      what="starting")
    log = reaper.log_path.read_text()
    assert "(chrono.E006) PostgreSQL at 127.0.0.1:" in log
    assert "starting anyway (CHRONO_SERVICE_CHECKS=warn)" in log


def test_worker_and_web_refuse_a_redis_that_evicts_and_keeps_no_aof(group, evicting_redis):
    where = f"Redis at 127.0.0.1:{SCRATCH_REDIS_PORT}"
    for name, argv in (("worker", WORKER), ("web", ["web", "127.0.0.1:5509"])):
        log = refused(group.start(name, argv, env={"REDIS_URL": evicting_redis}))
        assert f"(chrono.E001) {where} runs with maxmemory-policy allkeys-lru" in log, name
        assert "HINT: Set `maxmemory-policy noeviction`" in log, name
        assert f"(chrono.E002) {where} runs without AOF (appendonly no)" in log, name
        assert "HINT: Set `appendonly yes`" in log, name
        assert "chrono.E006" not in log, "the pair's PostgreSQL commits synchronously"


def test_reaper_refuses_a_classic_queue_where_chrono_declares_a_quorum_queue(
        group, classic_queue_broker):
    url, queue = classic_queue_broker
    log = refused(group.start("reaper", ["reaper"],
                              env={"BROKER_URL": url, "CHRONO_DEFAULT_QUEUE": queue}))
    assert (f"(chrono.E012) RabbitMQ at 127.0.0.1:{SCRATCH_RABBITMQ_PORT} has the queue "
            f"{queue!r} as a classic queue") in log
    assert "inequivalent arg 'x-queue-type'" in log
    assert f"HINT: Move its messages elsewhere (a shovel) and delete it (`rabbitmqctl " \
           f"delete_queue {queue}`)" in log
