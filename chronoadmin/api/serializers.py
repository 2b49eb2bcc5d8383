"""Serializers: the API's JSON shapes. Input is checked by :mod:`chronoadmin.api.validation`
(shared with the bulk path), so these classes mostly describe fields for the OpenAPI schema."""

from __future__ import annotations

from datetime import UTC

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from chronoadmin.api.errors import RequestTooLarge
from chronoadmin.api.validation import (
    MAX_AHEAD_MS,
    MAX_RETRIES,
    MAX_TEXT_LENGTH,
    QUEUE_NAME,
    TASK_NAME,
    JobSpec,
    Limits,
    SpecInvalid,
    parse_job_spec,
    parse_update,
    unknown_field_errors,
)
from chronoadmin.config import get_config
from chronoadmin.models import ApiKey, Tenant
from reaper.models import Worker
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.cron import format_fire_time, parse_cron
from scheduler.errors import InvalidSchedule
from scheduler.models import Execution, Job, JobStatus

NEXT_FIRE_TIMES = 5


def current_limits() -> Limits:
    """The limits of a request being served now."""
    config = get_config()
    return Limits(
        now_ms=now_ms(),
        default_queue=config.default_queue,
        max_payload_bytes=config.max_payload_bytes,
        run_at_grace_ms=config.run_at_grace_ms,
    )


class JobCreateSerializer(serializers.Serializer):
    """A job to create: exactly one of ``run_at``, ``delay_ms`` or ``cron_expression``."""

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


class _JobFieldsSerializer(serializers.Serializer):
    """Fields every kind of job takes (schema only; JobCreateSerializer validates)."""

    job_type = serializers.RegexField(
        "^" + TASK_NAME.pattern.removesuffix("\\Z") + "$", max_length=MAX_TEXT_LENGTH,
        help_text="The Celery task to run, e.g. 'billing.tasks.send_invoice'.",
    )
    name = serializers.CharField(max_length=MAX_TEXT_LENGTH, required=False, allow_blank=True)
    queue = serializers.RegexField(
        "^" + QUEUE_NAME.pattern.removesuffix("\\Z") + "$", max_length=MAX_TEXT_LENGTH,
        required=False, help_text="Queue name (default 'chrono').",
    )
    args = serializers.ListField(child=serializers.JSONField(), required=False)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False)
    max_retries = serializers.IntegerField(min_value=0, max_value=MAX_RETRIES, required=False)


class OneTimeJobAtSerializer(_JobFieldsSerializer):
    """A one-time job that runs at ``run_at``."""

    run_at = serializers.DateTimeField(help_text="ISO 8601 with a UTC offset.")


class OneTimeJobAfterSerializer(_JobFieldsSerializer):
    """A one-time job that runs ``delay_ms`` milliseconds from now."""

    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_AHEAD_MS)


class CronJobSerializer(_JobFieldsSerializer):
    """A recurring job on ``cron_expression``, evaluated in ``timezone`` (default UTC)."""

    cron_expression = serializers.CharField(max_length=MAX_TEXT_LENGTH)
    timezone = serializers.CharField(max_length=64, required=False)


JOB_CREATE_SCHEMA = PolymorphicProxySerializer(
    component_name="JobCreate",
    serializers=[OneTimeJobAtSerializer, OneTimeJobAfterSerializer, CronJobSerializer],
    resource_type_field_name=None,
)


class JobUpdateSerializer(serializers.Serializer):
    """A change of when a job fires: ``run_at`` (one-time jobs) or ``cron_expression`` and/or
    ``timezone`` (cron jobs)."""

    run_at = serializers.DateTimeField(required=False)
    cron_expression = serializers.CharField(max_length=MAX_TEXT_LENGTH, required=False)
    timezone = serializers.CharField(max_length=64, required=False)

    def to_internal_value(self, data: object) -> dict[str, object]:
        try:
            return parse_update(data, current_limits())
        except SpecInvalid as exc:
            raise serializers.ValidationError(exc.errors) from None


class FireTimeSerializer(serializers.Serializer):
    utc = serializers.DateTimeField()
    local = serializers.CharField(help_text="ISO 8601 in the job's time zone, with its offset.")


def utc_iso(fire_ms: int) -> str:
    return ms_to_datetime(fire_ms).astimezone(UTC).isoformat().replace("+00:00", "Z")


def next_fire_times(job: Job, *, count: int = NEXT_FIRE_TIMES) -> list[dict[str, str]]:
    """When a job fires next, in UTC and in its time zone; none once it is finished."""
    if job.status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
        return []
    if job.cron_expression:
        try:
            schedule = parse_cron(job.cron_expression, job.timezone)
            times = schedule.fire_times_ms(now_ms(), count)
        except InvalidSchedule:  # a row written by hand; the API never stores one
            return []
    elif job.next_run_at is not None:
        times = [datetime_to_ms(job.next_run_at)]
    else:
        return []
    return [{"utc": utc_iso(ms), "local": format_fire_time(ms, job.timezone)} for ms in times]


class JobSerializer(serializers.ModelSerializer):
    class Meta:
        model = Job
        fields = (
            "job_id", "name", "job_type", "status", "cron_expression", "timezone", "next_run_at",
            "queue", "args", "kwargs", "max_retries", "retry_count", "created_at", "updated_at",
            "cancelled_at",
        )  # fmt: skip
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    next_fire_times = serializers.SerializerMethodField(
        help_text=f"The next {NEXT_FIRE_TIMES} fire times of a cron job (the one of a one-time "
        "job), in UTC and in the job's time zone."
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


class BlankAsNullURLField(serializers.URLField):
    """A URL that may be unset: stored as "", shown as null (an empty string is no URI)."""

    def to_representation(self, value: str) -> str | None:
        return value or None


class ExecutionSerializer(serializers.ModelSerializer):
    job_id = serializers.UUIDField(read_only=True)
    logs_url = BlankAsNullURLField(read_only=True, allow_null=True)

    class Meta:
        model = Execution
        fields = (
            "execution_id", "job_id", "attempt", "status", "worker_id", "scheduled_for",
            "dispatched_at", "started_at", "finished_at", "exit_code", "result", "error",
            "logs_url",
        )  # fmt: skip
        read_only_fields = fields


class WorkerSerializer(serializers.ModelSerializer):
    class Meta:
        model = Worker
        fields = ("worker_id", "queue_name", "hostname", "pid", "started_at",
                  "last_heartbeat_at", "is_healthy")
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


class ApiKeySerializer(StrictModelSerializer):
    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all())

    class Meta:
        model = ApiKey
        fields = ("key_id", "tenant", "name", "prefix", "created_at", "revoked_at",
                  "last_used_at")
        read_only_fields = ("key_id", "prefix", "created_at", "revoked_at", "last_used_at")


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(
        read_only=True, help_text="The whole key. Shown this once: it is stored only hashed."
    )

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")
        read_only_fields = (*ApiKeySerializer.Meta.read_only_fields, "key")
