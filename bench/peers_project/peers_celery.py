"""The Celery app every peer runs: one task, ``peers.record``, that records when it started.

A start is one line ``key|due_ms|published_ms|started_ms`` pushed to the Redis list
``peers:starts`` (empty fields: unknown). ``published_ms`` is stamped into the message's headers
by ``before_task_publish`` in the publishing process (a beat); Chrono's messages carry their own
(``chrono_execution_id``, ``chrono_fire_ms``, ``chrono_published_ms``), which Celery exposes on
``task.request``.

Environment: ``PEERS_BROKER_URL``, ``PEERS_REDIS_URL``, ``PEERS_QUEUE``, ``PEERS_QUEUE_TYPE``
(``classic``, or ``quorum`` for a queue Chrono declared), ``PEERS_CRON_JOBS`` (entries of the
in-config schedule Celery beat and RedBeat read: ``cron-0`` … every minute), ``PEERS_STAMP``
(0: no publish stamp, for ETA tasks published long before they are due).

``chrono bench drain`` runs this worker as the plain Celery worker it compares Chrono's with:
its task ``peers.noop`` has the body of Chrono's ``chrono.noop``; ``PEERS_ACKS_LATE`` (1: acks
after the task, a message whose worker died rejected back to the queue) and
``PEERS_PREFETCH_MULTIPLIER`` give it the delivery settings of Chrono's worker, and
``PEERS_DRAIN_STATS`` (a directory) makes :mod:`peers_drain` count what it drained.
"""

from __future__ import annotations

import os
import time

import django
import redis
from celery import Celery
from celery.schedules import crontab
from celery.signals import before_task_publish
from celery.worker.consumer import Consumer
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peers_settings")
django.setup()

STARTS_KEY = "peers:starts"
QUEUE = os.environ.get("PEERS_QUEUE", "peers")

app = Celery("peers", broker=os.environ["PEERS_BROKER_URL"])
_arguments = ({"x-queue-type": "quorum"} if os.environ.get("PEERS_QUEUE_TYPE") == "quorum"
              else None)
app.conf.update(
    task_default_queue=QUEUE,
    task_queues=[Queue(QUEUE, Exchange(QUEUE, "direct"), routing_key=QUEUE,
                       queue_arguments=_arguments)],
    timezone="UTC",
    enable_utc=True,
    task_ignore_result=True,
    worker_enable_remote_control=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    redbeat_redis_url=os.environ.get("PEERS_REDIS_URL"),
    task_acks_late=os.environ.get("PEERS_ACKS_LATE") == "1",
    task_reject_on_worker_lost=os.environ.get("PEERS_ACKS_LATE") == "1",
    worker_prefetch_multiplier=int(os.environ.get("PEERS_PREFETCH_MULTIPLIER", "4")),
    beat_schedule={
        f"cron-{i}": {"task": "peers.record", "schedule": crontab(),
                      "kwargs": {"key": f"cron-{i}"}}
        for i in range(int(os.environ.get("PEERS_CRON_JOBS", "0")))
    },
)



class ConsumerWithoutDelayedDelivery(Consumer):
    """Celery's consumer less the native delayed delivery step, which a worker adds when its
    queue is a quorum queue (Chrono's): that step declares 28 ``celery_delayed_*`` queues on
    the shared broker, for ETA messages Chrono never publishes (chronoadmin/celery.py does the
    same for Chrono's own worker)."""

    class Blueprint(Consumer.Blueprint):
        default_steps = [step for step in Consumer.Blueprint.default_steps
                         if not step.endswith(":DelayedDelivery")]


if _arguments:
    app.conf.worker_consumer = "peers_celery:ConsumerWithoutDelayedDelivery"

_redis = redis.Redis.from_url(os.environ["PEERS_REDIS_URL"]) if os.environ.get(
    "PEERS_REDIS_URL") else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@before_task_publish.connect
def stamp_publish(headers=None, **_):
    if headers is not None and os.environ.get("PEERS_STAMP", "1") == "1":
        headers["peers_published_ms"] = now_ms()


@app.task(name="peers.record")
def record(key=None, due_ms=None, **_):
    started = now_ms()
    request = record.request
    published = getattr(request, "peers_published_ms", None)
    execution_id = getattr(request, "chrono_execution_id", None)
    if execution_id:  # published by Chrono
        key, due_ms = execution_id, getattr(request, "chrono_fire_ms", None)
        published = getattr(request, "chrono_published_ms", None)
    fields = (key or request.id, due_ms, published, started)
    _redis.rpush(STARTS_KEY, "|".join("" if f is None else str(f) for f in fields))


@app.task(name="peers.noop")
def noop(*args, **kwargs):
    return None


if os.environ.get("PEERS_DRAIN_STATS"):
    import peers_drain  # noqa: F401 - connects its signal handlers
