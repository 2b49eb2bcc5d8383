"""Audit searches as the REST API and the admin page ask for them: parameters in, engine query out.

Pure: :func:`parse_audit_query` validates query-string parameters into an :class:`AuditQuery`
(collecting every problem, per parameter, in :class:`InvalidAuditQuery`), and
:meth:`AuditQuery.body` writes the ``_search`` body. The tenant is never a parameter of the
tenant-facing API: the caller puts the authenticated key's tenant into the query, as a filter
clause that the free-text part cannot widen.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from search.audit import ACTIONS, FAILURE, SUCCESS, UNKNOWN
from search.errors import InvalidAuditQuery

OUTCOMES = (SUCCESS, FAILURE, UNKNOWN)
ORDERS = ("asc", "desc")
MAX_TEXT_CHARS = 500
# Fields the free-text parameter ``q`` searches (simple_query_string: never a syntax error).
TEXT_FIELDS = (
    "message", "error.message", "error.type", "event.action", "event.reason", "chrono.actor",
    "chrono.job_type", "chrono.job_name", "chrono.worker_id", "labels.tenant",
)
PARAMETERS = ("q", "job", "execution", "action", "outcome", "after", "before", "order",
              "page_size", "cursor")
# A cursor holds the sort values of a page's last hit: its @timestamp (epoch ms) and its
# event.sequence (an outbox id). Values outside these bounds were not written by this module,
# and the engine would refuse them (a 503 for what is the client's mistake).
MAX_CURSOR_CHARS = 100  # two 19-digit numbers in base64 take 59
MAX_CURSOR_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_CURSOR_SEQUENCE = 2**63 - 1  # a long
INVALID_CURSOR = "Invalid cursor; use the cursor in the next link of the previous page, unchanged."


@dataclass(frozen=True)
class AuditQuery:
    """One page of an audit search. ``tenant_id`` None searches every tenant (staff only)."""

    tenant_id: str | None
    text: str = ""
    job_id: str | None = None
    execution_id: str | None = None
    actions: tuple[str, ...] = ()
    outcome: str | None = None
    after: datetime | None = None
    before: datetime | None = None
    order: str = "desc"
    page_size: int = 50
    search_after: tuple[int, int] | None = None
    extra_filters: tuple[dict[str, Any], ...] = field(default=())
    # Fields of the documents left out of the answer (a tenant's search: the stack traces that
    # documents written before tracebacks were kept for staff only still hold).
    hidden_fields: tuple[str, ...] = ()

    def filters(self) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = list(self.extra_filters)
        if self.tenant_id is not None:
            filters.append({"term": {"chrono.tenant_id": self.tenant_id}})
        if self.job_id:
            filters.append({"term": {"chrono.job_id": self.job_id}})
        if self.execution_id:
            filters.append({"term": {"chrono.execution_id": self.execution_id}})
        if self.actions:
            filters.append({"terms": {"event.action": list(self.actions)}})
        if self.outcome:
            filters.append({"term": {"event.outcome": self.outcome}})
        if self.after or self.before:
            filters.append(time_range_filter(self.after, self.before))
        return filters

    def body(self, *, counts: bool = False) -> dict[str, Any]:
        """The ``_search`` body; with ``counts``, terms aggregations by action and outcome."""
        query: dict[str, Any] = {"filter": self.filters()}
        if self.text:
            query["must"] = [{
                "simple_query_string": {
                    "query": self.text,
                    "fields": list(TEXT_FIELDS),
                    "default_operator": "and",
                    "lenient": True,
                }
            }]
        body: dict[str, Any] = {
            "query": {"bool": query},
            "sort": [
                {"@timestamp": {"order": self.order}},
                {"event.sequence": {"order": self.order}},
            ],
            "size": self.page_size + 1,  # one more: is there a next page?
            "track_total_hits": True,
        }
        if self.search_after is not None:
            body["search_after"] = list(self.search_after)
        if self.hidden_fields:
            body["_source"] = {"excludes": list(self.hidden_fields)}
        if counts:
            body["aggs"] = {
                "actions": {"terms": {"field": "event.action", "size": len(ACTIONS) + 10}},
                "outcomes": {"terms": {"field": "event.outcome", "size": len(OUTCOMES) + 2}},
            }
        return body


@dataclass(frozen=True)
class AuditPage:
    """What one search answered: the documents (each with its ``id``), the total, the cursor of
    the next page (None on the last) and, when asked for, the counts by action and outcome."""

    documents: list[dict[str, Any]]
    total: int
    total_is_exact: bool
    next_cursor: str | None
    action_counts: dict[str, int] = field(default_factory=dict)
    outcome_counts: dict[str, int] = field(default_factory=dict)


def read_page(query: AuditQuery, reply: Mapping[str, Any]) -> AuditPage:
    """The :class:`AuditPage` of ``reply``, the engine's answer to ``query.body()``."""
    hits = reply.get("hits") or {}
    rows = list(hits.get("hits") or [])
    next_cursor = None
    if len(rows) > query.page_size:
        rows = rows[: query.page_size]
        next_cursor = encode_cursor(rows[-1]["sort"])
    total = hits.get("total") or {}
    aggregations = reply.get("aggregations") or {}
    return AuditPage(
        documents=[{"id": row["_id"], **row.get("_source", {})} for row in rows],
        total=int(total.get("value", len(rows))) if isinstance(total, dict) else int(total),
        total_is_exact=not isinstance(total, dict) or total.get("relation", "eq") == "eq",
        next_cursor=next_cursor,
        action_counts=_buckets(aggregations.get("actions")),
        outcome_counts=_buckets(aggregations.get("outcomes")),
    )


def parse_audit_query(
    params: Mapping[str, Any],
    *,
    tenant_id: str | None,
    default_page_size: int,
    max_page_size: int,
    allowed: tuple[str, ...] = PARAMETERS,
) -> AuditQuery:
    """An :class:`AuditQuery` from query-string ``params`` (a Django ``QueryDict`` or a plain
    mapping); raises :class:`InvalidAuditQuery` naming every parameter at fault."""
    errors: dict[str, list[str]] = {}
    for name in sorted(set(params) - set(allowed) - {"format"}):
        errors[name] = [f"Unknown query parameter; allowed: {', '.join(sorted(allowed))}."]
    get = _getter(params)
    query = AuditQuery(tenant_id=tenant_id, page_size=default_page_size)
    text = get("q").strip()
    if len(text) > MAX_TEXT_CHARS:
        errors["q"] = [f"At most {MAX_TEXT_CHARS} characters."]
    job_id = _uuid(get("job"), "job", errors)
    execution_id = _uuid(get("execution"), "execution", errors)
    actions = tuple(a.strip() for a in ",".join(_getlist(params, "action")).split(",")
                    if a.strip())
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        errors["action"] = [f"Unknown action {', '.join(unknown)}; use one or more (comma "
                            f"separated) of: {', '.join(ACTIONS)}."]
    outcome = get("outcome") or None
    if outcome is not None and outcome not in OUTCOMES:
        errors["outcome"] = [f"Use one of: {', '.join(OUTCOMES)}."]
    after = _datetime(get("after"), "after", errors)
    before = _datetime(get("before"), "before", errors)
    if after and before and after >= before:
        errors["before"] = ["Must be later than after."]
    order = get("order") or "desc"
    if order not in ORDERS:
        errors["order"] = ["Use asc (oldest first) or desc (newest first)."]
    page_size = _page_size(get("page_size"), default_page_size, max_page_size, errors)
    cursor = get("cursor")
    search_after = None
    if cursor:
        search_after = decode_cursor(cursor)
        if search_after is None:
            errors["cursor"] = [INVALID_CURSOR]
    if errors:
        raise InvalidAuditQuery(errors)
    return replace(query, text=text, job_id=job_id, execution_id=execution_id, actions=actions,
                   outcome=outcome, after=after, before=before, order=order,
                   page_size=page_size, search_after=search_after)


def encode_cursor(sort_values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(sort_values).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int] | None:
    """The search_after values in ``cursor``, or None when it is not one this module wrote."""
    if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
        return None
    try:
        # validate: urlsafe_b64decode() would skip the characters that are not base64.
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        values = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not (isinstance(values, list) and len(values) == 2
            and all(type(value) is int for value in values)):
        return None
    timestamp_ms, sequence = values
    if not (0 <= timestamp_ms <= MAX_CURSOR_TIMESTAMP_MS and 0 <= sequence <= MAX_CURSOR_SEQUENCE):
        return None
    return timestamp_ms, sequence


def _getter(params: Mapping[str, Any]):
    def get(name: str) -> str:
        value = params.get(name)
        return "" if value is None else str(value)

    return get


def _getlist(params: Mapping[str, Any], name: str) -> list[str]:
    getlist = getattr(params, "getlist", None)
    if getlist is not None:
        return [str(v) for v in getlist(name)]
    value = params.get(name)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def _uuid(raw: str, name: str, errors: dict[str, list[str]]) -> str | None:
    if not raw:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        errors[name] = [f"'{raw[:64]}' is not a valid UUID."]
        return None


def _datetime(raw: str, name: str, errors: dict[str, list[str]]) -> datetime | None:
    if not raw:
        return None
    try:
        parsed = parse_datetime(raw)
    except ValueError:
        parsed = None
    if parsed is None:
        errors[name] = [f"'{raw[:64]}' is not an ISO 8601 date-time, e.g. "
                        "2025-01-31T08:00:00Z."]
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        errors[name] = ["Enter a date-time between years 1 and 9999."]
        return None


def _page_size(raw: str, default: int, maximum: int, errors: dict[str, list[str]]) -> int:
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        errors["page_size"] = [f"'{raw[:32]}' is not allowed; use a whole number from 1 to "
                               f"{maximum}."]
        return default
    return int(raw)


def time_range_filter(after: datetime | None, before: datetime | None) -> dict[str, Any]:
    """The ``@timestamp`` filter of ``[after, before)`` (either may be None)."""
    time_range: dict[str, str] = {}
    if after:
        time_range["gte"] = _iso(after)
    if before:
        time_range["lt"] = _iso(before)
    return {"range": {"@timestamp": time_range}}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _buckets(aggregation: Mapping[str, Any] | None) -> dict[str, int]:
    if not aggregation:
        return {}
    return {str(b["key"]): int(b["doc_count"]) for b in aggregation.get("buckets", [])}
