"""Chrono's side of a Celery worker: the task base class that records every Chrono execution.

A message published by the beat carries ``chrono_execution_id`` and ``chrono_attempt`` headers. The
task starts the execution with a conditional update before running the body; a delivery that may
not start (a duplicate, a cancelled execution) returns without running anything. Calls without the
headers (``task.delay()``, a plain Celery message) run as ordinary Celery tasks.
"""

from __future__ import annotations

import logging
import traceback

from celery import Task

from chronoadmin.config import get_config
from scheduler.executions import finish_execution, start_execution
from scheduler.models import ExecutionStatus

log = logging.getLogger("chrono.worker")


class ChronoTask(Task):
    """Base class of every task in Chrono's Celery app (``task_cls``)."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        execution_id = getattr(self.request, "chrono_execution_id", None)
        if not execution_id:
            return super().__call__(*args, **kwargs)
        started = start_execution(
            execution_id,
            attempt=int(getattr(self.request, "chrono_attempt", 1) or 1),
            worker_id=self.request.hostname or "unknown",
            lease_ttl_ms=get_config().execution_lease_ttl_ms,
        )
        if started is None:
            log.info("execution %s not startable (duplicate or cancelled): skipped", execution_id)
            return None
        try:
            result = super().__call__(*args, **kwargs)
        except Exception as exc:
            recorded = finish_execution(
                started,
                status=ExecutionStatus.FAILED,
                error="".join(traceback.format_exception(exc))[-8_000:],
                exit_code=1,
            )
            if not recorded:
                log.warning("result of %s refused by the fencing check", execution_id)
            raise
        if not finish_execution(started, status=ExecutionStatus.SUCCEEDED, result=result,
                                exit_code=0):
            log.warning("result of %s refused by the fencing check", execution_id)
        return result
