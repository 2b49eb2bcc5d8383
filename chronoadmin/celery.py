"""Chrono's Celery app: what ``chrono worker`` runs, and the settings the beat publishes for.

Queues are durable quorum queues bound to the ``chrono.dispatch`` direct exchange, declared with the
same arguments by the beat's publisher (:func:`scheduler.dispatch.declare_queue`), so either side
may declare first. Acks are late and a message whose worker died is rejected back to the queue
(``task_reject_on_worker_lost``): a job is never acknowledged before it ran.
"""

from __future__ import annotations

import os
import time

from celery import Celery
from celery.concurrency.prefork import TaskPool as PreforkTaskPool
from celery.concurrency.solo import TaskPool as SoloTaskPool
from celery.concurrency.thread import TaskPool as ThreadTaskPool
from celery.signals import (
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from celery.worker.consumer import Consumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")

from django.db import close_old_connections  # noqa: E402

# get_config() here: the Celery app and its signal handlers are the worker process's edge: the app
# is configured from it, and the handlers (no owner exists when Celery calls them) read it too.
from chronocore.config import get_config  # noqa: E402
from chronocore.runtime import freeze_startup_heap  # noqa: E402
from scheduler.dispatch import DISPATCH_EXCHANGE  # noqa: E402
from scheduler.queues import chrono_queue, dispatch_exchange  # noqa: E402, F401

CONFIG = get_config()


class ChronoConsumer(Consumer):
    """Celery's consumer without its native delayed delivery step.

    Celery adds that step to every worker whose queues are quorum queues, as Chrono's are: it
    declares the ``celery_delayed_*`` exchanges and queues on the broker, so that messages
    carrying an ETA wait there rather than in the worker, and binds each queue's exchange to
    them. Chrono publishes no ETA (delayed work waits in the timer store and retries in the
    ``chrono.retry.<ms>`` TTL queues; every message's ``eta`` is None,
    :mod:`scheduler.dispatch`), and ``chrono.dispatch`` is a direct exchange, which the step
    cannot bind: it only declared 29 unused exchanges and 28 quorum queues and logged, at every
    worker start, that ETA tasks would block the worker.
    """

    class Blueprint(Consumer.Blueprint):
        default_steps = [step for step in Consumer.Blueprint.default_steps
                         if not step.endswith(":DelayedDelivery")]


app = Celery("chrono", task_cls="scheduler.worker:ChronoTask")
app.conf.update(
    broker_url=CONFIG.broker_url,
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    accept_content=["json"],
    result_backend=None,
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=8,
    task_default_queue=CONFIG.default_queue,
    task_default_exchange=DISPATCH_EXCHANGE,
    task_default_exchange_type="direct",
    task_default_routing_key=CONFIG.default_queue,
    task_queues=[chrono_queue(CONFIG.default_queue)],
    task_create_missing_queues=False,
    worker_hijack_root_logger=False,
    worker_consumer="chronoadmin.celery:ChronoConsumer",
    worker_send_task_events=False,
    # A lost broker connection does not stop running tasks (Celery plans to make it do so by
    # default): their messages go back to the queue, the worker-side start refuses the new
    # delivery while the lease is held, and the run goes on to record its result.
    worker_cancel_long_running_tasks_on_connection_loss=False,
    imports=["chronoadmin.builtin_tasks", "scheduler.heartbeats"],
)
# Celery's Django fix-up closes every database connection before and after every task unless
# this (old-style) key is set: a new PostgreSQL connection per task capped a worker near 150
# tasks/s. Connections are instead recycled by Django's CONN_MAX_AGE and health checks, from
# the task_prerun handler below.
app.conf["CELERY_DB_REUSE_MAX"] = 1_000_000_000


_last_recycle_check = [0.0]


@task_prerun.connect
def _recycle_stale_database_connections(**_: object) -> None:
    # At most once a second: each check costs a health-check round trip on the next query,
    # which at a thousand tasks a second is a fifth of a task's database time.
    now = time.monotonic()
    if now - _last_recycle_check[0] >= 1.0:
        _last_recycle_check[0] = now
        close_old_connections()


@worker_init.connect
def _before_the_pool_forks(sender: object = None, **_: object) -> None:
    # A prefork pool's children inherit the sending end of the channel their successes reach
    # the consumer's recorder through (scheduler.consumer_recording); the recorder makes
    # their starts too when the pool has enough children for its batches to pay for its
    # hand-overs.
    from celery.concurrency import get_implementation
    from django.db import connections

    from scheduler.consumer_recording import MIN_PREFORK_CHILDREN, open_success_channel

    concurrency = getattr(sender, "concurrency", None)
    try:
        prefork = issubclass(get_implementation(getattr(sender, "pool_cls", None)),
                             PreforkTaskPool)
    except (ImportError, KeyError, TypeError, ValueError):
        prefork = False
    if prefork and isinstance(concurrency, int):
        open_success_channel(starts=concurrency >= MIN_PREFORK_CHILDREN)
    # And no database connection: the start-up checks' would be shared with every child, and
    # a query of the worker's process on it (the recorder's grants) waited for ever on an
    # answer a child had read.
    connections.close_all()


@worker_ready.connect
def _prepare_worker(sender: object = None, **_: object) -> None:
    # The worker's process, once its consumer is up. A thread pool's tasks run in it: its
    # recording connections open now, not while the first jobs wait (a prefork child opens
    # its own below).
    pool = getattr(sender, "pool", None)
    if isinstance(pool, ThreadTaskPool | SoloTaskPool):
        from chronocore import grants
        from scheduler import log_capture
        from scheduler.worker import connect_recording, record_in_consumer, warm_threads

        connect_recording(batches=isinstance(pool, ThreadTaskPool))
        # The grants are renewed ahead of their expiry, not reloaded by the deliveries of a
        # burst; the pool's threads exist before the first job (chronocore.grants).
        grants.start_refresher()
        if isinstance(pool, ThreadTaskPool):
            warm_threads(pool)
            # Its deliveries wait for idle threads in front of it, and a recorder thread beside
            # the consumer records their starts and successes (scheduler.consumer_recording),
            # woken at the end of each turn of the consumer's event loop (the hub).
            hub = getattr(sender, "hub", None)
            if hub is not None:
                record_in_consumer(pool, hub)
        # Tasks run in this process: their log records are captured here (a solo pool runs
        # one at a time, so every thread's records are its task's, as in a prefork child).
        if log_capture.install_for(get_config()) and isinstance(pool, SoloTaskPool):
            log_capture.capture_process_wide()
    from scheduler.consumer_recording import close_success_channel, success_channel

    channel = success_channel()
    hub = getattr(sender, "hub", None)
    if isinstance(pool, PreforkTaskPool) and channel is not None and hub is not None:
        from chronocore import grants
        from scheduler.worker import record_in_consumer

        # The children's successes are recorded here, as they send them (the same recorder as
        # a thread pool's), and from MIN_PREFORK_CHILDREN children on their starts are made
        # here too, as the consumer hands each to an idle child; the grants are read here for
        # that.
        if channel.starts:
            grants.start_refresher()
        record_in_consumer(pool, hub, channel)
    else:
        close_success_channel()
    # Every worker advances workflow runs as their steps end, in a child process of its own
    # (workflows.engine_child), unless the deployment runs `chrono workflow-engine` for it.
    if get_config().workflow_engine_in_worker and not _engine_child:
        from scheduler.metrics import count_engine_child_exit
        from workflows.engine_child import EngineChild

        _engine_child.append(EngineChild(on_exit=count_engine_child_exit).start())
    freeze_startup_heap()


_engine_child: list = []


@worker_shutting_down.connect
def _no_engine_restarts(**_: object) -> None:
    # From the start of a shutdown: a child that Ctrl-C or the supervisor's SIGTERM reached
    # with the worker stays stopped.
    for child in _engine_child:
        child.stopping()
    from scheduler.worker import consumer_recording_closing

    consumer_recording_closing()


@worker_shutdown.connect
def _stop_engine_child(**_: object) -> None:
    # After the worker's own tasks: the successes its consumer still holds are recorded, and
    # the ends they wrote are applied before the child stops.
    from scheduler.consumer_recording import close_success_channel
    from scheduler.worker import close_consumer_recording

    close_consumer_recording()
    close_success_channel()
    while _engine_child:
        _engine_child.pop().stop()


@worker_process_init.connect
def _prepare_pool_child(**_: object) -> None:
    # Each prefork child, once initialised. It runs one task at a time: every thread's log
    # records while it runs are that task's.
    from chronocore import grants
    from scheduler import log_capture
    from scheduler.consumer_recording import success_channel
    from scheduler.worker import connect_recording

    channel = success_channel()
    if channel is not None:
        # Its successes are sent to the worker's process (scheduler.consumer_recording).
        channel.child_side()
    if channel is None or not channel.starts:
        connect_recording()
        grants.start_refresher()
    # Otherwise its starts are made there too, where the grants are read: what a task still
    # records itself (a failure, a refusal, what the recorder left it) connects and reads on
    # first use. Three connections and a thread less a child (~190 connections less for 64
    # children).
    if log_capture.install_for(get_config()):
        log_capture.capture_process_wide()
    freeze_startup_heap()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _flush_execution_logs(**_: object) -> None:
    # What the last tasks logged since the last flush, written before the process goes.
    from scheduler import log_capture

    log_capture.flush()
