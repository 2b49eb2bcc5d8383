"""Outbox rows as documents Kibana understands: Elastic Common Schema fields, Chrono's own fields
under ``chrono.*``, the tenant on every document. Pure: no database, no engine.

A row's ``data`` holds what its call site knew (attempt, worker, error, duration…); known keys
become their ECS or ``chrono.*`` field, the rest is kept, unindexed, under ``chrono.details``.
Platform events (a worker up or down) have no tenant: their ``chrono.tenant_id`` is
:data:`PLATFORM_TENANT`, which no tenant's search ever matches.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from search.audit import ACTIONS
from search.index_template import DATASET, ECS_VERSION

PLATFORM_TENANT = "platform"
SUMMARY_ERROR_CHARS = 300

# data keys that become chrono.<key> as they are (mapped in search.index_template.MAPPINGS).
_CHRONO_KEYS = (
    "attempt", "worker_id", "job_type", "queue", "scheduled_for", "next_run_at", "lateness_ms",
    "exit_code", "fencing_token", "cron_expression", "timezone", "max_retries",
)
# The last line of a Python traceback: "module.ExceptionType: message" (or the type alone).
_TRACEBACK_LAST_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::\s*(.*))?", re.DOTALL)
# A one-line error names its type when the name says it is one: a built-in's ("ValueError: …",
# "StopIteration") or a dotted one, as the worker writes every other
# ("billing.errors.CardDeclined: …"); "lost: attempt 2 …" names none.
_ONE_LINE_ERROR = re.compile(
    r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Timeout"
    r"|Warning|Iteration))(?::\s*(.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One outbox row as the indexer reads it, with what it joins in about the job and tenant."""

    id: int
    occurred_at: datetime
    action: str
    outcome: str
    tenant_id: uuid.UUID | str | None = None
    job_id: uuid.UUID | str | None = None
    execution_id: uuid.UUID | str | None = None
    actor: str = ""
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    job_type: str | None = None
    job_name: str | None = None
    tenant_slug: str | None = None


def build_document(row: OutboxRow, *, namespace: str) -> dict[str, Any]:
    """The ECS document of ``row`` for the data stream ``logs-chrono.audit-<namespace>``."""
    spec = ACTIONS.get(row.action)
    data = dict(row.data or {})
    error_text = data.pop("error", None)
    duration_us = data.pop("duration_us", None)
    reason = data.pop("reason", None)
    hostname = data.pop("hostname", None)
    pid = data.pop("pid", None)
    labels = {str(k): str(v) for k, v in (data.pop("labels", None) or {}).items()}
    chrono: dict[str, Any] = {
        "tenant_id": str(row.tenant_id) if row.tenant_id else PLATFORM_TENANT,
        "actor": row.actor,
    }
    if row.job_id:
        chrono["job_id"] = str(row.job_id)
    if row.execution_id:
        chrono["execution_id"] = str(row.execution_id)
    for key in _CHRONO_KEYS:
        value = data.pop(key, None)
        if value is not None and value != "":
            chrono[key] = value
    job_name = data.pop("name", None) or row.job_name
    if job_name:
        chrono["job_name"] = job_name
    if row.job_type and "job_type" not in chrono:
        chrono["job_type"] = row.job_type
    if data:
        chrono["details"] = data
    if row.tenant_slug:
        labels.setdefault("tenant", row.tenant_slug)

    event: dict[str, Any] = {
        "action": row.action,
        "outcome": row.outcome,
        "kind": "event",
        "dataset": DATASET,
        "module": "chrono",
        "id": str(row.id),
        "sequence": row.id,
    }
    if spec is not None:
        event["category"] = [spec.category]
        event["type"] = [spec.kind_of_change]
    if isinstance(duration_us, int | float):
        event["duration"] = int(duration_us) * 1000  # ECS: nanoseconds
    if isinstance(reason, dict):  # a structured reason ({"code", "text", ...}): ECS wants text
        reason = reason.get("text") or json.dumps(reason, sort_keys=True)
    if reason:
        event["reason"] = str(reason)

    document: dict[str, Any] = {
        "@timestamp": _iso(row.occurred_at),
        "event": event,
        "log": {"level": spec.level if spec else "info", "logger": "chrono.audit"},
        "ecs": {"version": ECS_VERSION},
        "data_stream": {"type": "logs", "dataset": DATASET, "namespace": namespace},
        "service": {"name": "chrono"},
        "chrono": chrono,
    }
    error = error_fields(error_text) if error_text else None
    if error:
        document["error"] = error
    if labels:
        document["labels"] = labels
    if hostname:
        document["host"] = {"name": hostname}
    if pid:
        document["process"] = {"pid": pid}
    document["message"] = row.message or _summary(row, spec, chrono, reason, error)
    return document


def error_fields(text: str) -> dict[str, str]:
    """ECS ``error.*`` of an error as a worker records it (a Python traceback, or one line):
    the exception's type and message from the last line, the whole text as the stack trace."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else str(text)
    fields: dict[str, str] = {"message": last}
    is_traceback = len(lines) > 1 and lines[0].startswith("Traceback")
    match = (_TRACEBACK_LAST_LINE if is_traceback else _ONE_LINE_ERROR).fullmatch(last)
    if match:
        fields["type"] = match.group(1)
        fields["message"] = match.group(2) or match.group(1)
    if len(lines) > 1:
        fields["stack_trace"] = str(text)
    return fields


def _summary(
    row: OutboxRow,
    spec: Any,
    chrono: Mapping[str, Any],
    reason: str | None,
    error: Mapping[str, str] | None,
) -> str:
    if spec is None:
        return f"{row.action} ({row.outcome})"
    job = chrono.get("job_id", "?")
    if chrono.get("job_type"):
        job = f"{chrono['job_type']} ({job})"
    error_text = ""
    if error:
        error_text = f"{error.get('type', 'error')}: {error['message']}"[:SUMMARY_ERROR_CHARS]
    values = {
        "job": job,
        "execution": chrono.get("execution_id", "?"),
        "actor": row.actor or "an unknown actor",
        "worker": chrono.get("worker_id") or row.actor.removeprefix("worker:") or "?",
        "reason": reason or "no reason recorded",
        "error": error_text or "no error recorded",
        "attempt": chrono.get("attempt", 1),
        "scheduled_for": chrono.get("scheduled_for", "?"),
    }
    return spec.summary.format_map(values)


def _iso(moment: datetime | str) -> str:
    if isinstance(moment, str):
        return moment
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
