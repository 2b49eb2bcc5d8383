"""Serializers: the API's JSON shapes. Input is checked by :mod:`scheduler.specs`, the one
validator of job specs (the bulk path's and the Python API's too), so these classes mostly
describe fields for the OpenAPI schema."""

from __future__ import annotations

import uuid
from datetime import UTC

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    PolymorphicProxySerializer,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.reverse import reverse

from chronoadmin.api.errors import RequestTooLarge
from chronocore.grants import pattern_problem
from chronocore.models import ApiKey, TaskGrant, Tenant
from reaper.models import Worker
from scheduler.clock import ms_to_datetime
from scheduler.cron import format_fire_time
from scheduler.errors import SpecInvalid
from scheduler.fire_times import upcoming_fire_ms
from scheduler.intervals import IntervalSchedule
from scheduler.job_writer import current_limits
from scheduler.misfire import MisfireRule
from scheduler.models import Execution, Job, MisfirePolicyChoice, OverlapPolicy
from scheduler.retry import RetryPolicy, effective_policy
from scheduler.specs import (
    MAX_AHEAD_MS,
    MAX_RETRIES,
    MAX_TEXT_LENGTH,
    QUEUE_NAME,
    TASK_NAME,
    ExecutionOptions,
    JobSpec,
    parse_job_spec,
    unknown_field_errors,
)

NEXT_FIRE_TIMES = 5


class JobCreateSerializer(serializers.Serializer):
    """A job to create: exactly one of ``run_at``, ``delay_ms``, ``cron_expression`` or
    ``interval_ms``."""

    job_type = serializers.CharField(
        max_length=MAX_TEXT_LENGTH,
        help_text="The Celery task to run, e.g. 'billing.tasks.send_invoice'.",
    )
    name = serializers.CharField(max_length=MAX_TEXT_LENGTH, required=False, allow_blank=True)
    queue = serializers.CharField(
        max_length=MAX_TEXT_LENGTH, required=False, help_text="Queue name (default 'chrono')."
    )
    args = serializers.ListField(child=serializers.JSONField(), required=False)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False)
    max_retries = serializers.IntegerField(min_value=0, max_value=MAX_RETRIES, required=False)
    run_at = serializers.DateTimeField(
        required=False, help_text="One-time job: when to run, ISO 8601 with a UTC offset."
    )
    delay_ms = serializers.IntegerField(
        min_value=0, max_value=MAX_AHEAD_MS, required=False,
        help_text="One-time job: milliseconds from now.",
    )
    cron_expression = serializers.CharField(
        max_length=MAX_TEXT_LENGTH, required=False,
        help_text="Recurring job: 5 fields (or 6 with seconds first) or a macro like @daily.",
    )
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="IANA time zone of cron_expression (UTC)."
    )

    def to_internal_value(self, data: object) -> JobSpec:
        try:
            return parse_job_spec(data, current_limits())
        except SpecInvalid as exc:
            if exc.too_large:
                raise RequestTooLarge(exc.errors) from None
            raise serializers.ValidationError(exc.errors) from None


def _pattern(regex) -> str:
    return "^" + regex.pattern.removesuffix("\\Z") + "$"


class RetryPolicySerializer(serializers.Serializer):
    """How failed attempts are retried: exponential backoff with full jitter. In a request,
    keys left out keep their value (the default, or the job's on a PATCH)."""

    max_attempts = serializers.IntegerField(
        min_value=1, max_value=RetryPolicy.MAX_ATTEMPTS, required=False,
        help_text="Attempts in all, the first run included (1 = no retry); max_retries + 1.",
    )
    initial_delay_ms = serializers.IntegerField(
        min_value=0, max_value=RetryPolicy.MAX_DELAY_MS, required=False,
        help_text="Upper bound of the delay before the first retry (default 1000).",
    )
    multiplier = serializers.FloatField(
        min_value=1, max_value=RetryPolicy.MAX_MULTIPLIER, required=False,
        help_text="Factor by which the bound grows at each retry (default 2.0).",
    )
    max_delay_ms = serializers.IntegerField(
        min_value=0, max_value=RetryPolicy.MAX_DELAY_MS, required=False,
        help_text="Cap of the bound (default 300000); at least initial_delay_ms.",
    )
    non_retryable = serializers.ListField(
        child=serializers.RegexField(_pattern(RetryPolicy.EXCEPTION_NAME),
                                     max_length=RetryPolicy.MAX_NAME_LENGTH),
        max_length=RetryPolicy.MAX_NON_RETRYABLE, required=False,
        help_text="Exception classes (short or dotted name) that end the execution at once.",
    )


@extend_schema_serializer(deprecate_fields=["max_retries"])
class _ExecutionFieldsSerializer(serializers.Serializer):
    """The execution options every kind of job takes (schema only)."""

    max_retries = serializers.IntegerField(
        min_value=0, max_value=MAX_RETRIES, required=False,
        help_text="Deprecated spelling of retry_policy.max_attempts - 1 (retries after the "
        "first run, default 0); still accepted. When both are given they must agree.",
    )
    retry_policy = RetryPolicySerializer(required=False)
    soft_timeout_ms = serializers.IntegerField(
        min_value=1, max_value=ExecutionOptions.MAX_TIMEOUT_MS, required=False, allow_null=True,
        help_text="The task gets SoftTimeLimitExceeded after this long (null: no limit).",
    )
    hard_timeout_ms = serializers.IntegerField(
        min_value=1, max_value=ExecutionOptions.MAX_TIMEOUT_MS, required=False, allow_null=True,
        help_text="The worker process is killed after this long and the attempt is lost, then "
        "retried (null: no limit). Above soft_timeout_ms.",
    )
    misfire_policy = serializers.ChoiceField(
        MisfirePolicyChoice.choices, required=False,
        help_text="What an occurrence dispatched later than the misfire grace does: fire_once "
        "(default: the latest late one runs), fire_all, skip.",
    )
    misfire_fire_all_limit = serializers.IntegerField(
        min_value=1, max_value=MisfireRule.MAX_FIRE_ALL_LIMIT, required=False,
        help_text="With misfire_policy fire_all: at most this many late occurrences run "
        "(default 10).",
    )


class _CronOptionsSerializer(serializers.Serializer):
    """The execution options of cron jobs only (schema only)."""

    overlap_policy = serializers.ChoiceField(
        OverlapPolicy.choices, required=False,
        help_text="What an occurrence does while the previous one still waits or runs: allow, "
        "skip (default), buffer_one, cancel_previous.",
    )
    jitter_ms = serializers.IntegerField(
        min_value=0, max_value=ExecutionOptions.MAX_JITTER_MS, required=False,
        help_text="Delay each occurrence by a fixed spread in [0, jitter_ms), below the gap "
        "between occurrences (default 0).",
    )
    calendars = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=10,
        help_text="Names of the tenant's exclusion calendars (/api/v1/calendars/): an "
        "occurrence on a day one of them excludes is skipped, recorded SKIPPED with the reason "
        "'calendar <name>'. A PATCH replaces the list ([]: none).",
    )


class _JobBasicsSerializer(serializers.Serializer):
    """What a job runs (schema only)."""

    job_type = serializers.RegexField(
        _pattern(TASK_NAME), max_length=MAX_TEXT_LENGTH,
        help_text="The Celery task to run, e.g. 'billing.tasks.send_invoice'.",
    )
    name = serializers.CharField(max_length=MAX_TEXT_LENGTH, required=False, allow_blank=True)
    queue = serializers.RegexField(
        _pattern(QUEUE_NAME), max_length=MAX_TEXT_LENGTH,
        required=False, help_text="Queue name (default 'chrono').",
    )
    args = serializers.ListField(child=serializers.JSONField(), required=False)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False)


class _JobFieldsSerializer(_JobBasicsSerializer, _ExecutionFieldsSerializer):
    """Fields every kind of job takes (schema only; JobCreateSerializer validates)."""


class OneTimeJobAtSerializer(_JobFieldsSerializer):
    """A one-time job that runs at ``run_at``."""

    run_at = serializers.DateTimeField(help_text="ISO 8601 with a UTC offset.")


class OneTimeJobAfterSerializer(_JobFieldsSerializer):
    """A one-time job that runs ``delay_ms`` milliseconds from now."""

    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_AHEAD_MS)


CRON_HELP = ("5 fields (or 6 with seconds first) or a macro like @daily; also L, L-n, LW, nW "
             "(day-of-month), dL, d#k (day-of-week) and H, H/n, H(a-b), H(a-b)/n hashed from "
             "the job's id.")
INTERVAL_HELP = (f"Every this many milliseconds of elapsed time ({IntervalSchedule.MIN_PERIOD_MS}"
                 f" to {IntervalSchedule.MAX_PERIOD_MS}); daylight saving does not change it.")
ANCHOR_HELP = ("The interval's first occurrence, ISO 8601 with a UTC offset (default: the time "
               "the job is created, so it first runs one interval later).")


class CronJobSerializer(_JobFieldsSerializer, _CronOptionsSerializer):
    """A recurring job on ``cron_expression``, evaluated in ``timezone`` (default UTC)."""

    cron_expression = serializers.CharField(max_length=MAX_TEXT_LENGTH, help_text=CRON_HELP)
    timezone = serializers.CharField(max_length=64, required=False)


class IntervalJobSerializer(_JobFieldsSerializer, _CronOptionsSerializer):
    """A recurring job every ``interval_ms`` from ``interval_anchor``; ``timezone`` is the zone
    its times are shown in."""

    interval_ms = serializers.IntegerField(
        min_value=IntervalSchedule.MIN_PERIOD_MS, max_value=IntervalSchedule.MAX_PERIOD_MS,
        help_text=INTERVAL_HELP)
    interval_anchor = serializers.DateTimeField(required=False, help_text=ANCHOR_HELP)
    timezone = serializers.CharField(max_length=64, required=False)


JOB_CREATE_SCHEMA = PolymorphicProxySerializer(
    component_name="JobCreate",
    serializers=[OneTimeJobAtSerializer, OneTimeJobAfterSerializer, CronJobSerializer,
                 IntervalJobSerializer],
    resource_type_field_name=None,
)


class JobUpdateSerializer(_ExecutionFieldsSerializer, _CronOptionsSerializer):
    """A change of when a job fires: ``run_at`` (one-time jobs) or ``cron_expression`` and/or
    ``timezone`` (cron jobs); and of its execution options (``overlap_policy`` and
    ``jitter_ms`` for cron jobs only). A ``retry_policy`` is merged into the job's: keys left
    out keep their value. Schema only: :func:`scheduler.api.update` checks a change, once the
    job is found and locked."""

    run_at = serializers.DateTimeField(required=False)
    cron_expression = serializers.CharField(max_length=MAX_TEXT_LENGTH, required=False,
                                            help_text=CRON_HELP)
    timezone = serializers.CharField(max_length=64, required=False)
    interval_ms = serializers.IntegerField(
        min_value=IntervalSchedule.MIN_PERIOD_MS, max_value=IntervalSchedule.MAX_PERIOD_MS,
        required=False, help_text=INTERVAL_HELP)
    interval_anchor = serializers.DateTimeField(required=False, help_text=ANCHOR_HELP)


class FireTimeSerializer(serializers.Serializer):
    utc = serializers.DateTimeField()
    local = serializers.CharField(help_text="ISO 8601 in the job's time zone, with its offset.")


def utc_iso(fire_ms: int) -> str:
    return ms_to_datetime(fire_ms).astimezone(UTC).isoformat().replace("+00:00", "Z")


def next_fire_times(job: Job, *, count: int = NEXT_FIRE_TIMES) -> list[dict[str, str]]:
    """When a job fires next, in UTC and in its time zone (:mod:`scheduler.fire_times`)."""
    return [{"utc": utc_iso(ms), "local": format_fire_time(ms, job.timezone)}
            for ms in upcoming_fire_ms(job, count)]


def retry_policy_of(job: Job) -> dict[str, object]:
    """The policy a job's attempts follow, every key filled in (max_retries gives max_attempts
    when the job has no policy of its own)."""
    try:
        return effective_policy(job.retry_policy, job.max_retries).to_json()
    except (TypeError, ValueError):  # a row written by hand; the API never stores one
        return RetryPolicy(max_attempts=job.max_retries + 1).to_json()


@extend_schema_serializer(deprecate_fields=["max_retries"])
class JobSerializer(serializers.ModelSerializer):
    max_retries = serializers.IntegerField(
        read_only=True,
        help_text="Deprecated: retry_policy.max_attempts - 1, shown for clients written before "
        "retry_policy.",
    )
    retry_policy = serializers.SerializerMethodField(
        help_text="The retry policy the job's attempts follow, defaults filled in."
    )

    class Meta:
        model = Job
        fields = (
            "job_id", "name", "job_type", "status", "cron_expression", "interval_ms",
            "interval_anchor", "timezone", "next_run_at",
            "queue", "args", "kwargs", "max_retries", "retry_policy", "soft_timeout_ms",
            "hard_timeout_ms", "overlap_policy", "misfire_policy", "misfire_fire_all_limit",
            "jitter_ms", "calendars", "retry_count", "created_at", "updated_at", "cancelled_at",
        )  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(RetryPolicySerializer)
    def get_retry_policy(self, job: Job) -> dict[str, object]:
        return retry_policy_of(job)


class JobDetailSerializer(JobSerializer):
    next_fire_times = serializers.SerializerMethodField(
        help_text=f"The next {NEXT_FIRE_TIMES} fire times of a cron job (the one of a one-time "
        "job), in UTC and in the job's time zone, each moved by the job's jitter."
    )

    class Meta(JobSerializer.Meta):
        fields = (*JobSerializer.Meta.fields, "next_fire_times")
        read_only_fields = fields

    @extend_schema_field(FireTimeSerializer(many=True))
    def get_next_fire_times(self, job: Job) -> list[dict[str, str]]:
        return next_fire_times(job)


class BulkErrorSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="Position of the item in the request (from 0).")
    field = serializers.CharField()
    message = serializers.CharField()


class BulkResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    failed = serializers.IntegerField()
    ids = serializers.ListField(
        child=serializers.UUIDField(allow_null=True),
        help_text="The new job's id for each item, in request order; null for a failed item.",
    )
    errors = BulkErrorSerializer(many=True)


class ExecutionLogsURLField(serializers.URLField):
    """Where the execution's log lines are read: ``GET /api/v1/executions/{id}/logs/`` (the
    column ``logs_url`` stays empty: the link follows from the id, and writing it would cost an
    update of every execution; a URL set there, an external log store's, is shown instead)."""

    def get_attribute(self, instance: Execution) -> Execution:
        return instance

    def to_representation(self, execution: Execution) -> str:
        if execution.logs_url:
            return execution.logs_url
        path = reverse("execution-logs", kwargs={"execution_id": execution.execution_id})
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class ExecutionSerializer(serializers.ModelSerializer):
    job_id = serializers.UUIDField(read_only=True)
    logs_url = ExecutionLogsURLField(read_only=True, help_text=(
        "The execution's log lines: GET on it with the same API key (docs/logs.md)."))

    class Meta:
        model = Execution
        fields = (
            "execution_id", "job_id", "attempt", "status", "worker_id", "scheduled_for",
            "dispatched_at", "started_at", "finished_at", "exit_code", "result", "error",
            "reason", "logs_url",
        )  # fmt: skip
        read_only_fields = fields


class WorkerSerializer(serializers.ModelSerializer):
    """``is_healthy`` is false once the worker is gone; ``stopped_at`` is set when it stopped
    cleanly (a warm shutdown's final heartbeat), empty while it runs and when it was lost."""

    class Meta:
        model = Worker
        fields = ("worker_id", "queue_name", "hostname", "pid", "started_at",
                  "last_heartbeat_at", "is_healthy", "stopped_at")
        read_only_fields = fields


class StrictModelSerializer(serializers.ModelSerializer):
    """Refuses fields it does not know (and read-only ones) instead of ignoring them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = tuple(name for name, f in self.fields.items() if not f.read_only)
            errors = unknown_field_errors(data, writable)
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class TenantSerializer(StrictModelSerializer):
    class Meta:
        model = Tenant
        fields = ("tenant_id", "slug", "name", "is_active", "created_at")
        read_only_fields = ("tenant_id", "created_at")


@extend_schema_field(OpenApiTypes.STR)
class TenantIdOrSlugField(serializers.PrimaryKeyRelatedField):
    """A tenant given by its id or by its slug (platform endpoints: their callers see every
    tenant); shown as its id."""

    def to_internal_value(self, data: object) -> Tenant:
        if isinstance(data, str):
            try:
                uuid.UUID(data)
            except ValueError:
                tenant = Tenant.objects.filter(slug=data).first()
                if tenant is None:
                    raise serializers.ValidationError(
                        f"No tenant has the slug or id {data[:64]!r}.") from None
                return tenant
        return super().to_internal_value(data)


class ApiKeySerializer(StrictModelSerializer):
    tenant = TenantIdOrSlugField(queryset=Tenant.objects.all(),
                                 help_text="The tenant's id, or its slug.")

    class Meta:
        model = ApiKey
        fields = ("key_id", "tenant", "name", "prefix", "created_at", "revoked_at",
                  "last_used_at")
        read_only_fields = ("key_id", "prefix", "created_at", "revoked_at", "last_used_at")


class TaskGrantSerializer(StrictModelSerializer):
    """A tenant's grant: tasks matching ``task_pattern`` on queues matching ``queue_pattern``
    (exact names or case-sensitive globs: ``billing.*``, ``*``; docs/security.md)."""

    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all())

    class Meta:
        model = TaskGrant
        fields = ("id", "tenant", "task_pattern", "queue_pattern", "created_at", "created_by")
        read_only_fields = ("id", "created_at", "created_by")
        validators: list = []  # a repeated grant is answered by the view (200, the grant)

    def validate(self, attrs: dict) -> dict:
        errors = {name: [problem] for name in ("task_pattern", "queue_pattern")
                  if (problem := pattern_problem(attrs.get(name, "*")))}
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True, help_text="The whole key. Shown this once: it is stored only hashed."
    )

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")
        read_only_fields = (*ApiKeySerializer.Meta.read_only_fields, "key")
