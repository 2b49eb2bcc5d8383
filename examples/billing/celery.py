"""The billing app's own Celery app, as an existing project has it, set up to run Chrono jobs.

Three lines differ from a plain Celery app: ``task_cls`` (every task records the Chrono executions
it runs; called without Chrono's headers, a task runs exactly as before), ``task_queues`` (Chrono's
queue declared as the beat declares it: a quorum queue on the ``chrono.dispatch`` exchange), and
``imports`` of Chrono's worker heartbeats. The ``beat_schedule`` is the one this app ran under
Celery beat; ``chrono import-beat examples.billing.celery:app`` turns it into Chrono cron jobs.

In a real project ``DJANGO_SETTINGS_MODULE`` names the project's settings, with Chrono's apps
installed and its database configured, and the broker URL is the project's own; this example
borrows Chrono's settings and broker URL (``BROKER_URL``, with the local credentials file's user
and password when it carries none).
"""

from __future__ import annotations

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")

from chronocore.config import get_config  # noqa: E402
from scheduler.queues import chrono_queue  # noqa: E402

# The queue Chrono dispatches billing jobs to. Give Chrono jobs a queue of their own: an existing
# classic queue of the same name cannot be re-declared as a quorum queue.
QUEUE = os.environ.get("BILLING_QUEUE", "billing")

app = Celery("billing", task_cls="scheduler.worker:ChronoTask", include=["examples.billing.tasks"])
app.conf.update(
    broker_url=get_config().broker_url,
    timezone="Europe/Paris",
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    # At least once: acknowledge a message after the task ran, and give it back when the
    # worker process running it dies.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_queues=[chrono_queue(QUEUE)],
    task_default_queue=QUEUE,
    task_default_exchange="chrono.dispatch",
    task_default_routing_key=QUEUE,
    imports=["scheduler.heartbeats"],
    beat_schedule={
        # Translated: a crontab keeps the app's time zone.
        "close-day": {
            "task": "billing.close_day",
            "schedule": crontab(minute=30, hour=2),
            "options": {"queue": QUEUE},
        },
        # An interval job: every 30 s of elapsed time.
        "sync-payments": {
            "task": "billing.sync_payments",
            "schedule": 30.0,
            "options": {"queue": QUEUE},
        },
        # An interval job: every 15 min of elapsed time (DST does not change the period).
        "refresh-rates": {
            "task": "billing.refresh_exchange_rates",
            "schedule": timedelta(minutes=15),
            "kwargs": {"currencies": ["EUR", "USD"]},
            "options": {"queue": QUEUE},
        },
        # An interval job too: any period from a second to 366 days, 7 s included.
        "poll-bank": {
            "task": "billing.poll_bank",
            "schedule": 7.0,
            "options": {"queue": QUEUE},
        },
    },
)
