"""Exceptions raised by the scheduler package: one family, rooted at :class:`SchedulerError`.

Every class says when it is raised. Errors caused by user input carry a message that says what to
change, and, where one field of the input is at fault, the name of that field in ``field``.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class of every error the scheduler package raises."""


# -- the processes' own errors: services failing under the beat, the worker and the reaper


class DispatchError(SchedulerError):
    """Raised when a batch could not be confirmed by RabbitMQ (nacked, timed out, connection
    lost). The batch's timers stay claimed and are published again; none is lost."""


class BrokerUnavailable(SchedulerError):
    """Raised when RabbitMQ cannot be reached or fails a passive declare for a reason other than
    the queue's absence; the inspector reconnects on its next call."""


class BeatThreadDied(SchedulerError, RuntimeError):
    """Raised by a beat replica's loop when one of its threads (firer, recorder) has ended: the
    replica stops rather than go on claiming timers nobody publishes."""


class PartitioningMissing(SchedulerError, RuntimeError):
    """Raised by the retention pass when ``chrono_execution`` is not a partitioned table (the
    database was not migrated to ``scheduler`` 0015): ``chrono migrate`` first."""


class AppNotFound(SchedulerError):
    """Raised when a ``MODULE`` or ``MODULE:APP`` argument names nothing importable or no
    Celery app; the message says what was tried."""


# -- bad input from a user


class InvalidSchedule(SchedulerError, ValueError):
    """Raised when a user-supplied schedule (cron expression, time zone, fire time) is unusable.

    ``field`` names the part of the input at fault (``"minute"``, ``"day_of_month"``,
    ``"timezone"``, ``"run_at"`` …) so APIs can report it per field.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidCronExpression(InvalidSchedule):
    """Raised when a cron expression cannot be parsed: wrong field count, bad value, bad macro."""


class CronNeverFires(InvalidSchedule):
    """Raised when a cron expression parses but can never fire (``0 0 30 2 *``)."""


class UnknownTimeZone(InvalidSchedule):
    """Raised when a time zone name is not an IANA zone known to this machine's tz database."""


class InvalidJob(SchedulerError, ValueError):
    """Raised when a job cannot be created as asked (bad delay, payload too large …).

    ``field`` names the argument at fault.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class PayloadTooLarge(InvalidJob):
    """Raised when a job's args and kwargs, as JSON, exceed the configured payload limit."""


class SpecInvalid(InvalidJob):
    """Raised by the job spec validator (:mod:`scheduler.specs`) when a job spec breaks a rule.

    ``errors`` maps each field at fault, in the job's own field names (those of the REST API:
    ``cron_expression``, ``retry_policy.multiplier``, ``non_field_errors`` for a rule spanning
    fields), to what to change; ``field`` and ``message`` are the first of them. ``too_large``
    says the payload limit was one of them (the REST API answers 413), and ``causes`` keeps the
    schedule errors (:class:`InvalidSchedule`) behind a field, which the Python API raises as
    they are."""

    def __init__(self, errors: dict[str, list[str]], *, too_large: bool = False,
                 causes: dict[str, InvalidSchedule] | None = None) -> None:
        field, messages = next(iter(errors.items()))
        super().__init__(messages[0], field=field)
        self.errors = errors
        self.too_large = too_large
        self.causes = causes or {}


class JobEnded(InvalidJob):
    """Raised when a job that is COMPLETED or CANCELLED is changed (rescheduled, configured,
    PATCHed): create a new job instead. ``field`` is ``status``; the REST API answers 409."""


class ExecutionNotRetryable(SchedulerError):
    """Raised when an execution is retried by hand while it has not ended badly (only FAILED,
    DEAD_LETTERED and LOST executions can be run again)."""


class JobNotFound(SchedulerError, LookupError):
    """Raised when a job id does not exist for the calling tenant (another tenant's id included)."""


class UntranslatableSchedule(InvalidSchedule):
    """Raised when a Celery beat schedule has no exact cron equivalent (an interval that does not
    divide a minute, an hour or a day; a solar or custom schedule; both day fields restricted)."""


class CalendarInUse(SchedulerError):
    """Raised when a calendar that jobs name would be deleted or renamed; the message counts
    them. ``field`` is ``name``; the REST API answers 409."""

    def __init__(self, message: str, *, field: str | None = "name") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class TaskNotGranted(SchedulerError, PermissionError):
    """Raised when a tenant schedules a task, or a queue, it was not granted
    (:mod:`chronocore.grants`). The message names the task and queue and how to get them
    granted; ``field`` is ``task_name``. The REST API answers 403."""

    def __init__(self, message: str, *, task_name: str, queue: str,
                 field: str = "task_name") -> None:
        super().__init__(message)
        self.message = message
        self.task_name = task_name
        self.queue = queue
        self.field = field
