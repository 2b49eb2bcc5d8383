"""Bulk ingest: validate many jobs, write the valid ones with one PostgreSQL COPY (and their audit
rows with one COPY per task name), then add their timers to Redis in pipelined batches once
the rows are committed.

This is the 50,000 jobs/s path, so it makes no ORM object and no serializer per item: items are
checked by the plain functions of :mod:`chronoadmin.api.validation`, rows go to COPY as tuples,
and timers go to :meth:`scheduler.timers.TimerStore.add` in batches of ``TIMER_BATCH``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from django.db import transaction

from chronoadmin.api import quota
from chronoadmin.api.errors import NON_FIELD
from chronoadmin.api.parsers import MalformedLine
from chronoadmin.api.validation import (
    ExecutionOptions,
    JobSpec,
    Limits,
    SpecInvalid,
    parse_job_spec,
)
from chronocore import grants
from chronocore.config import get_config
from chronocore.pgcopy import NULL, TimestampText, copy_rows, copy_text, escape
from scheduler.api import timer_store
from scheduler.misfire import jittered_ms
from scheduler.models import Job, JobStatus
from search import audit

TIMER_BATCH = 10_000
COPY_CHUNK = 2_000
# The UUID variant bits (10xx) in the 17th hex digit, from any random digit.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
# Columns COPY fills per row, in row order; every other column of the table is a constant.
# The execution options come last, written as one piece (most jobs of a batch share theirs).
_OPTION_COLUMNS = ("max_retries", "retry_policy", "soft_timeout_ms", "hard_timeout_ms",
                   "overlap_policy", "misfire_policy", "misfire_fire_all_limit", "jitter_ms")
_PER_ROW = ("job_id", "name", "job_type", "cron_expression", "timezone", "next_run_at",
            "args", "kwargs", "queue", *_OPTION_COLUMNS)
_PER_REQUEST = ("tenant", "status")  # created_at, updated_at: the database's default (now)


@dataclass
class BulkResult:
    """What became of each item: its new job id (or None) and the errors of the failed ones."""

    ids: list[str | None]
    errors: list[dict[str, object]] = field(default_factory=list)

    @property
    def created(self) -> int:
        return sum(job_id is not None for job_id in self.ids)

    def as_dict(self) -> dict[str, object]:
        created = self.created
        return {"created": created, "failed": len(self.ids) - created, "ids": self.ids,
                "errors": self.errors}


@dataclass(frozen=True)
class _CopyPlan:
    sql: str
    defaults: tuple  # values of the columns after the per-row and per-request ones


@cache
def _copy_plan() -> _CopyPlan:
    """COPY statement for the jobs table. Columns added to Job later get their model default,
    so this keeps working when the model grows (a column with a db_default, or a generated one,
    is left to PostgreSQL)."""
    fields = {f.name: f for f in Job._meta.concrete_fields}
    rest = [
        f for name, f in fields.items()
        if name not in _PER_ROW and name not in _PER_REQUEST
        and not f.has_db_default() and not getattr(f, "generated", False)
    ]
    defaults = []
    for f in rest:
        value = f.get_default()
        if isinstance(value, list | dict):
            value = json.dumps(value)
        defaults.append(value)
    columns = [fields[n].column for n in (*_PER_ROW, *_PER_REQUEST)] + [f.column for f in rest]
    sql = f"COPY {Job._meta.db_table} ({', '.join(columns)}) FROM STDIN"
    return _CopyPlan(sql=sql, defaults=tuple(defaults))


def validate_items(items: list, limits: Limits, *, tenant_id: uuid.UUID | None = None,
                   ) -> tuple[BulkResult, list[JobSpec]]:
    """Check every item; ids are assigned to the valid ones (in order) and errors to the rest.
    With ``tenant_id``, an item whose task or queue the tenant was not granted is refused
    (field ``job_type``, the message of the REST API's 403). A cron job with jitter gets its
    first occurrence spread by its id, as schedule_cron does."""
    result = BulkResult(ids=[None] * len(items))
    specs: list[JobSpec] = []
    valid: list[int] = []
    errors = result.errors
    for index, item in enumerate(items):
        if isinstance(item, MalformedLine):
            errors.append({"index": index, "field": NON_FIELD, "message": item.message})
            continue
        try:
            spec = parse_job_spec(item, limits)
        except SpecInvalid as exc:
            for field_name, messages in exc.errors.items():
                for message in messages:
                    errors.append({"index": index, "field": field_name, "message": message})
            continue
        if tenant_id is not None and (
            refused := grants.refusal(tenant_id, spec.job_type, spec.queue)
        ):
            errors.append({"index": index, "field": "job_type", "message": refused})
            continue
        specs.append(spec)
        valid.append(index)
    for index, job_id, spec in zip(valid, new_job_ids(len(valid)), specs, strict=True):
        result.ids[index] = job_id
        if spec.options.jitter_ms:
            spec.fire_at_ms = jittered_ms(job_id, spec.fire_at_ms, spec.options.jitter_ms)
    return result, specs


def ingest(tenant_id: uuid.UUID, items: list, limits: Limits) -> BulkResult:
    """Validate ``items``, COPY the valid ones as jobs of ``tenant_id`` and add their timers
    after commit. Raises QuotaExceeded (nothing written) when they would pass the quota."""
    result, specs = validate_items(items, limits, tenant_id=tenant_id)
    if not specs:
        return result
    quota.check_quota(tenant_id, len(specs))
    job_ids = [job_id for job_id in result.ids if job_id is not None]
    timers = [(job_id, spec.fire_at_ms) for job_id, spec in zip(job_ids, specs, strict=True)]
    announce_before_ms = limits.now_ms + get_config().lookahead_ms * 2
    with transaction.atomic():
        copy_jobs(tenant_id, job_ids, specs)
        record_created(tenant_id, job_ids, specs)
        transaction.on_commit(lambda: add_timers(timers, announce_before_ms))
    quota.count_created(tenant_id, len(specs))
    return result


def record_created(tenant_id: uuid.UUID, job_ids: list[str], specs: list[JobSpec]) -> None:
    """One JOB_CREATED audit row per job, in the COPY's transaction: one COPY per task name
    in the batch (the rows of one COPY share their data)."""
    by_job_type: dict[str, list[str]] = defaultdict(list)
    for job_id, spec in zip(job_ids, specs, strict=True):
        by_job_type[spec.job_type].append(job_id)
    for job_type, ids in by_job_type.items():
        audit.record_jobs(audit.JOB_CREATED, tenant_id=tenant_id, job_ids=ids,
                          data={"job_type": job_type, "via": "bulk"})


def copy_jobs(tenant_id: uuid.UUID, job_ids: list[str], specs: list[JobSpec]) -> None:
    """Write the jobs with one COPY on Django's connection (so inside its transaction).

    Rows are formatted as COPY text here rather than by psycopg's ``write_row``: at bulk rates
    that halves the Python time per row. Only ``name`` and the JSON payloads can hold characters
    COPY treats specially; every other column is validated to be free of them.
    """
    plan = _copy_plan()
    constants = "\t".join([str(tenant_id), JobStatus.ACTIVE.value,
                            *(copy_text(value) for value in plan.defaults)])
    copy_rows(plan.sql, (
        _copy_lines(job_ids[start:start + COPY_CHUNK], specs[start:start + COPY_CHUNK], constants)
        for start in range(0, len(specs), COPY_CHUNK)
    ))


def _copy_lines(job_ids: list[str], specs: list[JobSpec], constants: str) -> str:
    timestamp = TimestampText()
    # Looked up by identity per row (the specs without options share one object,
    # validation.DEFAULT_OPTIONS), formatted once per distinct value.
    by_value: dict[ExecutionOptions, str] = {}
    options_text = {}
    for options in {id(spec.options): spec.options for spec in specs}.values():
        if options not in by_value:
            by_value[options] = _options_text(options)
        options_text[id(options)] = by_value[options]
    return "".join([
        f"{job_id}\t{escape(spec.name)}\t{spec.job_type}\t{spec.cron_expression or NULL}\t"
        f"{spec.timezone}\t{timestamp(spec.fire_at_ms)}\t"
        f"{escape(spec.args_json)}\t{escape(spec.kwargs_json)}\t{spec.queue}\t"
        f"{options_text[id(spec.options)]}\t{constants}\n"
        for job_id, spec in zip(job_ids, specs, strict=True)
    ])


def _options_text(options: ExecutionOptions) -> str:
    """The _OPTION_COLUMNS of a row, as COPY text."""
    return "\t".join(copy_text(value) for value in (
        options.max_retries, options.retry_policy_json, options.soft_timeout_ms,
        options.hard_timeout_ms, options.overlap_policy, options.misfire_policy,
        options.misfire_fire_all_limit, options.jitter_ms,
    ))


def new_job_ids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs as strings, from one ``os.urandom`` call: five times
    faster than ``uuid.uuid4()`` one by one, which matters at 50,000 jobs a second."""
    digits = os.urandom(16 * count).hex()
    ids = []
    for start in range(0, 32 * count, 32):
        h = digits[start:start + 32]
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return ids


def add_timers(timers: list[tuple[str, int]], announce_before_ms: int) -> None:
    """Add timers to Redis, one pipelined round trip per ``TIMER_BATCH``."""
    store = timer_store()
    for start in range(0, len(timers), TIMER_BATCH):
        store.add(timers[start:start + TIMER_BATCH], announce_before_ms=announce_before_ms)
