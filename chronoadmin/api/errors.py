"""Errors of the REST API (each with its HTTP status) and the mapping of scheduler error fields
to API fields (``at`` is ``run_at``, a cron field such as ``minute`` is ``cron_expression``)."""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import APIException

from scheduler import specs

# A rule spanning fields; the job fields are the API's own (scheduler.specs names them so).
NON_FIELD = specs.NON_FIELD


def api_field(scheduler_field: str | None) -> str:
    """The REST API field a scheduler error's ``field`` refers to (a Python API argument such
    as ``at``, a cron expression's part such as ``minute``): :func:`scheduler.specs.spec_field`."""
    return specs.spec_field(scheduler_field)


class RequestTooLarge(APIException):
    """Raised when a request body, or one job's args and kwargs, exceed a size limit (413)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request is too large."
    default_code = "too_large"


class QuotaExceeded(APIException):
    """Raised when a tenant would hold more pending jobs than its quota allows (429)."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "quota_exceeded"

    def __init__(self, detail: str, *, wait_s: int) -> None:
        super().__init__(detail)
        self.wait = wait_s


class Conflict(APIException):
    """Raised when a job's state does not allow the action asked for (409)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class IdempotencyKeyReused(APIException):
    """Raised when an ``Idempotency-Key`` comes back with a different request (422)."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


class IdempotentRequestInProgress(APIException):
    """Raised when the first request with an ``Idempotency-Key`` has not finished yet (409)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_in_progress"


class TimerStoreUnavailable(APIException):
    """Raised when Redis does not answer (503); jobs already committed are kept."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "timer_store_unavailable"


class TaskNotGrantedError(APIException):
    """Raised when the caller's tenant was not granted the task or queue it asked for (403)."""

    status_code = status.HTTP_403_FORBIDDEN
    default_code = "task_not_granted"
