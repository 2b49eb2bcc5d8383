"""Bulk ingest: validate many jobs, write the valid ones with the job writer's COPY mode, and
answer what became of each.

This is the 50,000 jobs/s path, so it makes no ORM object and no serializer per item: items are
checked by the one validator of job specs (:func:`scheduler.specs.parse_job_spec`, with its fast
path for plain items), each item's grant and calendars are checked by
:class:`scheduler.job_writer.ItemChecks` (a refused item fails alone, field ``job_type`` or
``calendars``), and the valid ones go to :func:`scheduler.job_writer.copy`: one PostgreSQL COPY for
the jobs and one per task name for their audit rows, then their timers in pipelined batches once
the rows are committed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from chronoadmin.api import quota
from chronoadmin.api.errors import NON_FIELD
from chronoadmin.api.parsers import MalformedLine
from scheduler import job_writer
from scheduler.errors import SpecInvalid
from scheduler.specs import JobSpec, Limits, parse_job_spec


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


def validate_items(items: list, limits: Limits, *, tenant_id: uuid.UUID | None = None,
                   ) -> tuple[BulkResult, list[int], list[JobSpec]]:
    """Check every item: the result holds the errors of the invalid ones; the valid ones are
    returned as their indexes and specs, in order. With ``tenant_id``, an item whose task or
    queue the tenant was not granted is refused (field ``job_type``, the message of the REST
    API's 403), and one naming calendars the tenant has not got, or that leave it no
    occurrence (field ``calendars``)."""
    result = BulkResult(ids=[None] * len(items))
    valid: list[int] = []
    specs: list[JobSpec] = []
    errors = result.errors
    checks = job_writer.ItemChecks(tenant_id) if tenant_id is not None else None
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
        if checks is not None and (refused := checks.refusal(spec)):
            errors.append({"index": index, "field": refused[0], "message": refused[1]})
            continue
        valid.append(index)
        specs.append(spec)
    return result, valid, specs


def ingest(tenant_id: uuid.UUID, items: list, limits: Limits) -> BulkResult:
    """Validate ``items``, write the valid ones as jobs of ``tenant_id`` (COPY) and add their
    timers after commit. Raises QuotaExceeded (nothing written) when they would pass the
    quota."""
    result, valid, specs = validate_items(items, limits, tenant_id=tenant_id)
    if not specs:
        return result
    quota.check_quota(tenant_id, len(specs))
    job_ids = job_writer.copy(tenant_id, specs, audit_data={"via": "bulk"})
    for index, job_id in zip(valid, job_ids, strict=True):
        result.ids[index] = job_id
    quota.count_created(tenant_id, len(specs))
    return result
