"""The billing app's tasks: two Chrono cron jobs and a one-time job, declared with
``@chrono_job`` on ordinary Celery tasks (``@app.task`` and ``@shared_task`` alike).

``chrono sync-jobs examples.billing.tasks --tenant acme`` creates the cron jobs;
``send_invoice_reminder.schedule(invoice_id, delay=…, tenant="acme")`` creates a one-time job.
"""

from __future__ import annotations

import logging

import redis
from celery import shared_task

from chronocore.config import get_config
from examples.billing.celery import QUEUE, app
from scheduler.decorators import chrono_job

log = logging.getLogger("billing.tasks")

# Reminders sent, by execution: a stand-in for the app's own table of sent e-mails.
REMINDER_KEY = "billing:reminder:{invoice_id}"
REMINDER_TTL_S = 30 * 24 * 3600


def _ledger() -> redis.Redis:
    return redis.Redis.from_url(get_config().redis_url)


@chrono_job(cron="0 6 1 * *", timezone="Europe/Paris", queue=QUEUE, misfire="fire_once",
            jitter_ms=60_000, retry={"max_attempts": 5, "initial_delay_ms": 10_000},
            overlap="skip")
@app.task(name="billing.close_month")
def close_month() -> str:
    """Closes last month's books at 06:00 (Paris) on the 1st; a missed run fires once."""
    log.info("closing the month")
    return "closed"


@chrono_job(cron="*/10 * * * *", queue=QUEUE)
@shared_task(name="billing.retry_failed_payments", bind=True)
def retry_failed_payments(self, limit: int = 100) -> int:
    """Retries failed card payments every ten minutes."""
    log.info("retrying up to %d payments (execution %s)", limit,
             getattr(self.request, "chrono_execution_id", None))
    return 0


@chrono_job(queue=QUEUE)
@shared_task(name="billing.send_invoice_reminder", bind=True)
def send_invoice_reminder(self, invoice_id: int) -> dict[str, object]:
    """Sends one payment reminder for an invoice: a one-time job, scheduled with
    ``send_invoice_reminder.schedule(invoice_id, delay=…)``.

    Delivery is at least once: a worker that dies after sending but before recording the result
    leaves the execution to run again. Every delivery of one execution carries the same
    ``chrono_execution_id``, so the side effect is keyed by it: the first run records the
    reminder and sends it, a repeat finds the record and sends nothing. (A plain ``delay()`` call
    carries no Chrono headers; the Celery task id stands in.)
    """
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    attempt = int(getattr(self.request, "chrono_attempt", 1) or 1)
    key = REMINDER_KEY.format(invoice_id=invoice_id)
    first = _ledger().hsetnx(key, execution_id, attempt)
    if not first:
        return {"invoice_id": invoice_id, "sent": False, "attempt": attempt}
    _ledger().expire(key, REMINDER_TTL_S)
    log.info("reminder for invoice %s sent (execution %s, attempt %d)", invoice_id,
             execution_id, attempt)
    return {"invoice_id": invoice_id, "sent": True, "attempt": attempt}


# The tasks the app's beat_schedule runs (examples/billing/celery.py): plain Celery tasks that
# `chrono import-beat` schedules without any change to them.


@app.task(name="billing.close_day")
def close_day() -> str:
    log.info("closing the day")
    return "closed"


@app.task(name="billing.sync_payments")
def sync_payments() -> int:
    return 0


@app.task(name="billing.refresh_exchange_rates")
def refresh_exchange_rates(currencies: list[str]) -> list[str]:
    return currencies


@app.task(name="billing.poll_bank")
def poll_bank() -> None:
    return None
