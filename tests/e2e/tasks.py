"""Tasks the end-to-end tests run on real workers; each leaves evidence in Redis.

``e2e:runs``        hash: execution id -> how many times the task body ran
``e2e:deliveries``  hash: execution id -> how many times a worker received it (duplicates show)
``e2e:delivery_log`` list: "<execution id>|<shard lease>|<published ms>" per delivery, to tell
                    which replica dispatched what, under which fencing token, and when
``e2e:attempts``    list: "<execution id>|<attempt>|<received ms>" per delivery
"""

from __future__ import annotations

import os
import time

import redis
from celery.signals import task_prerun

from chronoadmin.celery import app
from chronocore.redis_client import redis_client

RUNS_KEY = "e2e:runs"
DELIVERIES_KEY = "e2e:deliveries"
DELIVERY_LOG_KEY = "e2e:delivery_log"
ATTEMPTS_KEY = "e2e:attempts"
EVIDENCE_URL_VARIABLE = "E2E_EVIDENCE_REDIS_URL"


def _redis() -> redis.Redis | redis.RedisCluster:
    """Where the evidence goes: the server E2E_EVIDENCE_REDIS_URL names (the cluster tests keep
    it off the Redis Cluster they break), else the process's config: REDIS_URL (the tests'
    database) with the credentials file's password, on a cluster when the process runs on one."""
    evidence_url = os.environ.get(EVIDENCE_URL_VARIABLE)
    if evidence_url:
        return redis.Redis.from_url(evidence_url)
    return redis_client()


@task_prerun.connect
def _record_delivery(task=None, **_: object) -> None:
    execution_id = getattr(task.request, "chrono_execution_id", None)
    if not execution_id:
        return
    lease = getattr(task.request, "chrono_shard_lease", "")
    published = getattr(task.request, "chrono_published_ms", 0)
    pipe = _redis().pipeline(transaction=False)
    pipe.hincrby(DELIVERIES_KEY, execution_id, 1)
    pipe.rpush(DELIVERY_LOG_KEY, f"{execution_id}|{lease}|{published}")
    attempt = getattr(task.request, "chrono_attempt", 1)
    pipe.rpush(ATTEMPTS_KEY, f"{execution_id}|{attempt}|{time.time_ns() // 1_000_000}")
    pipe.execute()


@app.task(name="e2e.record_run", bind=True)
def record_run(self, label: str = "") -> str:
    """Counts each run of each execution in the hash ``e2e:runs`` (execution id -> runs)."""
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    _redis().hincrby(RUNS_KEY, execution_id, 1)
    return label


@app.task(name="e2e.fail", bind=True)
def fail(self) -> None:
    """Always raises (after counting its run)."""
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    _redis().hincrby(RUNS_KEY, execution_id, 1)
    raise RuntimeError("e2e.fail always fails")


@app.task(name="e2e.sleep", bind=True)
def sleep(self, seconds: float = 1.0) -> float:
    """Sleeps, then counts its run like ``record_run``."""
    time.sleep(seconds)
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    _redis().hincrby(RUNS_KEY, execution_id, 1)
    return seconds


@app.task(name="e2e.log_lines", bind=True)
def log_lines(self, label: str = "", count: int = 5, pause_s: float = 0.0,
              fail_attempts: int = 0, hang_s: float = 0.0) -> int:
    """Logs ``count`` lines "<label> line <i> of attempt <n>" (``pause_s`` apart, from logger
    ``e2e.app``, one from a thread it starts, one printed), fails its first ``fail_attempts``
    attempts after logging, and sleeps ``hang_s`` at the end (a worker to kill mid-task)."""
    import logging
    import threading

    logger = logging.getLogger("e2e.app")
    attempt = int(getattr(self.request, "chrono_attempt", 1) or 1)
    for i in range(count):
        logger.info("%s line %d of attempt %d", label, i, attempt)
        if pause_s:
            time.sleep(pause_s)
    worker = threading.Thread(
        target=lambda: logging.getLogger("e2e.thread").warning(
            "%s from a thread of attempt %d", label, attempt))
    worker.start()
    worker.join()
    print(f"{label} printed by attempt {attempt}")
    if attempt <= fail_attempts:
        raise RuntimeError(f"{label} fails attempt {attempt}")
    if hang_s:
        logger.info("%s hangs for %.1f s", label, hang_s)
        time.sleep(hang_s)
        logger.info("%s woke up", label)
    return count


@app.task(name="e2e.log_until_released", bind=True)
def log_until_released(self, gate: str, timeout_s: float = 60.0) -> bool:
    """Logs "waiting for <gate>", then waits (up to ``timeout_s``) until the Redis key ``gate``
    exists, and logs "released by <gate>": a line logged when the test says so."""
    import logging

    logger = logging.getLogger("e2e.app")
    logger.info("waiting for %s", gate)
    deadline = time.monotonic() + timeout_s
    while not _redis().exists(gate):
        if time.monotonic() > deadline:
            logger.error("never released by %s", gate)
            return False
        time.sleep(0.05)
    logger.info("released by %s", gate)
    return True
