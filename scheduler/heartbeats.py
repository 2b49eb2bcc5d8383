"""Worker heartbeats: every Chrono worker upserts its row in ``chrono_worker`` every few seconds.

Runs in the worker's main process (not in the pool children), on its own thread, from the
``worker_ready`` signal to ``worker_shutdown``; an app's Celery workers get it by listing
``"scheduler.heartbeats"`` in the app's ``imports``. The reaper reads ``last_heartbeat_at`` to tell
live workers from dead ones. The table is the reaper's ``Worker`` model; this side of it is one
SQL upsert and imports nothing of the reaper's.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery.signals import worker_ready, worker_shutdown
from django.db import DatabaseError, close_old_connections, connection

from chronocore.config import get_config
from chronocore.probe import Progress
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.metrics import heartbeat_progress
from search import audit

log = logging.getLogger("chrono.worker")


def beat_heart(
    worker_id: str, *, queue_name: str, final: bool = False, event: str | None = None
) -> None:
    """Upsert one heartbeat of ``worker_id``; with ``event`` (``audit.WORKER_UP`` on the first
    heartbeat, ``audit.WORKER_DOWN`` on the final one), its audit row in the same statement.
    The ``final`` one, sent at the end of a warm shutdown, marks the worker stopped (not
    healthy, ``stopped_at`` set); any other clears ``stopped_at`` (a worker of the same id
    started again)."""
    at = ms_to_datetime(now_ms())
    upsert = (
        "INSERT INTO chrono_worker (worker_id, queue_name, hostname, pid, started_at, "
        "last_heartbeat_at, is_healthy, stopped_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (worker_id) DO UPDATE SET last_heartbeat_at = EXCLUDED.last_heartbeat_at, "
        "is_healthy = EXCLUDED.is_healthy, queue_name = EXCLUDED.queue_name, "
        "pid = EXCLUDED.pid, stopped_at = EXCLUDED.stopped_at"
    )
    if event is not None:
        upsert = (
            f"WITH w AS ({upsert} RETURNING worker_id, queue_name, hostname, pid, "
            "last_heartbeat_at) "
            + audit.insert_select(
                "w",
                action_name=event,
                actor="'worker:' || w.worker_id",
                occurred_at="w.last_heartbeat_at",
                tenant_id="NULL",
                job_id="NULL",
                data="jsonb_build_object('worker_id', w.worker_id, 'queue', w.queue_name, "
                "'hostname', w.hostname, 'pid', w.pid)",
            )
        )
    with connection.cursor() as cursor:
        cursor.execute(
            upsert, [worker_id, queue_name, socket.gethostname(), os.getpid(), at, at,
                     not final, at if final else None]
        )


class HeartbeatThread(threading.Thread):
    """Upserts the worker's row every ``interval_ms`` and marks ``progress`` (its /health)."""

    def __init__(self, worker_id: str, queue_name: str, *, interval_ms: int,
                 progress: Progress) -> None:
        super().__init__(name="chrono-heartbeat", daemon=True)
        self.worker_id = worker_id
        self.queue_name = queue_name
        self.interval_ms = interval_ms
        self.progress = progress
        self.stopping = threading.Event()

    def run(self) -> None:
        interval_s = self.interval_ms / 1000
        up_recorded = False
        while not self.stopping.is_set():
            try:
                beat_heart(self.worker_id, queue_name=self.queue_name,
                           event=None if up_recorded else audit.WORKER_UP)
                up_recorded = True
                self.progress.mark()  # the worker's /health
            except DatabaseError as exc:
                log.error("heartbeat of %s failed, retrying: %r", self.worker_id, exc)
                close_old_connections()
            self.stopping.wait(interval_s)
        try:
            beat_heart(self.worker_id, queue_name=self.queue_name, final=True,
                       event=audit.WORKER_DOWN)
        except DatabaseError as exc:
            log.error("final heartbeat of %s failed: %r", self.worker_id, exc)
        finally:
            connection.close()


_thread: HeartbeatThread | None = None


@worker_ready.connect
def _start_heartbeats(sender: object = None, **_: object) -> None:
    global _thread
    queues = ",".join(q.name for q in sender.app.amqp.queues.consume_from.values())
    # A Celery signal handler, in the workers of any app that lists this module: nothing owns
    # the heartbeats to hand them a configuration, so the process's is read here.
    config = get_config()
    _thread = HeartbeatThread(sender.hostname, queues,
                              interval_ms=config.worker_heartbeat_interval_ms,
                              progress=heartbeat_progress(config))
    _thread.start()


@worker_shutdown.connect
def _stop_heartbeats(**_: object) -> None:
    if _thread is not None:
        _thread.stopping.set()
        _thread.join(timeout=5)
