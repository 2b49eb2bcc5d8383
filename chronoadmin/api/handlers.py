"""The DRF exception handler of the API: every failure becomes a clear answer, never a 500.

Scheduler errors raised by :mod:`scheduler.api` carry the name of the input at fault in
``field``; they become 400 (413 for an oversized payload) under the API's name of that field;
the job spec validator's :class:`~scheduler.errors.SpecInvalid` already names the API's fields,
all of them. A task or queue the tenant was not granted is 403
(:class:`scheduler.errors.TaskNotGranted`), a change of an ended job 409
(:class:`~scheduler.errors.JobEnded`).
"""

from __future__ import annotations

import logging

import redis
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from chronoadmin.api.errors import (
    Conflict,
    RequestTooLarge,
    TaskNotGrantedError,
    TimerStoreUnavailable,
    api_field,
)
from scheduler.errors import (
    CalendarInUse,
    InvalidJob,
    InvalidSchedule,
    JobEnded,
    JobNotFound,
    PayloadTooLarge,
    SpecInvalid,
    TaskNotGranted,
)

logger = logging.getLogger("chrono.api")


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler, plus scheduler errors (400/404/413 with the field) and Redis (503)."""
    if isinstance(exc, TaskNotGranted):
        exc = TaskNotGrantedError(exc.message)
    elif isinstance(exc, JobEnded | CalendarInUse):
        exc = Conflict(exc.message)
    elif isinstance(exc, SpecInvalid):
        exc = RequestTooLarge(exc.errors) if exc.too_large else ValidationError(exc.errors)
    elif isinstance(exc, PayloadTooLarge):
        exc = RequestTooLarge({api_field(exc.field): [exc.message]})
    elif isinstance(exc, InvalidSchedule | InvalidJob):
        exc = ValidationError({api_field(exc.field): [exc.message]})
    elif isinstance(exc, JobNotFound):
        return Response({"detail": "No job with this id."}, status=status.HTTP_404_NOT_FOUND)
    elif isinstance(exc, redis.RedisError):
        logger.exception("timer store error while serving the API")
        exc = TimerStoreUnavailable(
            "The timer store (Redis) did not answer; retry shortly. Jobs committed before the "
            "failure are kept in PostgreSQL, the source of truth: list them before retrying."
        )
    return drf_exception_handler(exc, context)
