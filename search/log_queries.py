"""Reading execution log lines: query-string parameters in, engine query out, a page back.

Two reads, both pure here (the caller runs the body on the engine):

* **one execution's lines** (``GET /api/v1/executions/{id}/logs/``, the admin's execution
  page): :func:`parse_log_query` into a :class:`LogQuery`. Lines come in the order they were
  logged: by attempt, then by sequence (the capture numbers an attempt's lines from 1); a
  cursor holds the last line's (attempt, sequence). ``follow`` is the cursor after the last
  line returned, given even on the last page, so a client following a running execution asks
  again with it and gets only the lines written since;
* **a tenant's lines across its executions** (``GET /api/v1/logs/``): :func:`parse_log_search`
  into a :class:`LogSearch`, filtered by job, execution, level, time and text, newest first
  (or oldest first), by ``@timestamp`` with the line's (execution, attempt, sequence) to break
  ties, which the cursor holds. It has no ``follow``: lines reach the engine out of time order
  (each host's shipper, each flush), so "after the last line's time" would miss some.

Parameters are validated collecting every problem per parameter in :class:`InvalidAuditQuery`
(the family's error for a bad search). The tenant is never a parameter: the caller puts the
authenticated tenant (and the execution it looked up in the tenant's rows) into every query as
filter clauses the text cannot widen; another tenant's job or execution id matches nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from search.errors import InvalidAuditQuery
from search.log_stream import LEVELS
from search.queries import (
    INVALID_CURSOR,
    MAX_CURSOR_CHARS,
    MAX_CURSOR_SEQUENCE,
    MAX_CURSOR_TIMESTAMP_MS,
    MAX_TEXT_CHARS,
    ORDERS,
    _datetime,
    _getter,
    _page_size,
    _uuid,
    decode_cursor,
    encode_cursor,
    time_range_filter,
)

PARAMETERS = ("attempt", "level", "q", "after", "before", "page_size", "cursor")
SEARCH_PARAMETERS = ("job", "execution", "level", "q", "after", "before", "order", "page_size",
                     "cursor")
TEXT_FIELDS = ("message", "error.message", "error.type", "log.logger")
MAX_ATTEMPT = 1_000_000
# A search across a tenant's lines counts them up to here (an exact count of days of lines
# costs the engine a visit of every match); the answer says whether its count is exact.
SEARCH_COUNT_LIMIT = 10_000
# A search cursor: [@timestamp ms, execution id, attempt, sequence] in base64 JSON (~100 chars).
MAX_SEARCH_CURSOR_CHARS = 2 * MAX_CURSOR_CHARS


@dataclass(frozen=True)
class LogQuery:
    """One page of one execution's lines. ``tenant_id`` None: every tenant (platform staff)."""

    execution_id: str
    tenant_id: str | None
    attempt: int | None = None
    min_level: str | None = None
    text: str = ""
    after: datetime | None = None
    before: datetime | None = None
    page_size: int = 100
    search_after: tuple[int, int] | None = None
    # Left out of the answer: a tenant's read leaves out stack traces (paths into the servers'
    # directories, Chrono's own frames), as the execution's traceback is for platform staff.
    hidden_fields: tuple[str, ...] = ()

    def body(self) -> dict[str, Any]:
        filters: list[dict[str, Any]] = [{"term": {"chrono.execution_id": self.execution_id}}]
        if self.tenant_id is not None:
            filters.append({"term": {"chrono.tenant_id": self.tenant_id}})
        if self.attempt is not None:
            filters.append({"term": {"chrono.attempt": self.attempt}})
        body: dict[str, Any] = {
            "query": _bool_query(filters, min_level=self.min_level, after=self.after,
                                 before=self.before, text=self.text),
            "sort": [{"chrono.attempt": "asc"}, {"event.sequence": "asc"}],
            "size": self.page_size + 1,
            "track_total_hits": True,
        }
        if self.search_after is not None:
            body["search_after"] = list(self.search_after)
        if self.hidden_fields:
            body["_source"] = {"excludes": list(self.hidden_fields)}
        return body


def _bool_query(filters: list[dict[str, Any]], *, min_level: str | None,
                after: datetime | None, before: datetime | None, text: str) -> dict[str, Any]:
    """``filters`` and the level, time and text conditions both reads share."""
    filters = list(filters)
    if min_level:
        filters.append({"terms": {"log.level": list(LEVELS[LEVELS.index(min_level):])}})
    if after or before:
        filters.append(time_range_filter(after, before))
    query: dict[str, Any] = {"filter": filters}
    if text:
        query["must"] = [{"simple_query_string": {
            "query": text, "fields": list(TEXT_FIELDS), "default_operator": "and",
            "lenient": True}}]
    return {"bool": query}


@dataclass(frozen=True)
class LogPage:
    lines: list[dict[str, Any]]
    total: int
    next_cursor: str | None
    follow_cursor: str | None


def read_log_page(query: LogQuery, reply: Mapping[str, Any]) -> LogPage:
    hits = reply.get("hits") or {}
    rows = list(hits.get("hits") or [])
    next_cursor = None
    if len(rows) > query.page_size:
        rows = rows[: query.page_size]
        next_cursor = encode_cursor(rows[-1]["sort"])
    if rows:
        follow_cursor = encode_cursor(rows[-1]["sort"])
    elif query.search_after is not None:
        follow_cursor = encode_cursor(list(query.search_after))
    else:
        follow_cursor = None
    total = hits.get("total") or {}
    return LogPage(
        lines=[line_of(row.get("_source", {})) for row in rows],
        total=int(total.get("value", len(rows))) if isinstance(total, dict) else int(total),
        next_cursor=next_cursor,
        follow_cursor=follow_cursor,
    )


def line_of(source: Mapping[str, Any]) -> dict[str, Any]:
    """What the API and the admin show of one line's document."""
    chrono = source.get("chrono") or {}
    log = source.get("log") or {}
    line: dict[str, Any] = {
        "timestamp": source.get("@timestamp"),
        "attempt": chrono.get("attempt"),
        "sequence": (source.get("event") or {}).get("sequence"),
        "level": log.get("level"),
        "logger": log.get("logger"),
        "message": source.get("message", ""),
        "error": source.get("error"),
        "thread": ((source.get("process") or {}).get("thread") or {}).get("name"),
        "worker_id": chrono.get("worker_id"),
    }
    if "dropped_lines" in chrono:
        line["dropped_lines"] = chrono["dropped_lines"]
        line["dropped_bytes"] = chrono.get("dropped_bytes", 0)
    return line


def parse_log_query(
    params: Mapping[str, Any],
    *,
    execution_id: str,
    tenant_id: str | None,
    default_page_size: int,
    max_page_size: int,
    allowed: tuple[str, ...] = PARAMETERS,
) -> LogQuery:
    """A :class:`LogQuery` from ``params``; raises :class:`InvalidAuditQuery` naming every
    parameter at fault."""
    errors: dict[str, list[str]] = {}
    for name in sorted(set(params) - set(allowed) - {"format"}):
        errors[name] = [f"Unknown query parameter; allowed: {', '.join(sorted(allowed))}."]
    get = _getter(params)
    attempt = None
    raw_attempt = get("attempt")
    if raw_attempt:
        if raw_attempt.isascii() and raw_attempt.isdigit() and 1 <= int(raw_attempt) <= MAX_ATTEMPT:
            attempt = int(raw_attempt)
        else:
            errors["attempt"] = [f"'{raw_attempt[:32]}' is not an attempt number (1 or more)."]
    level, text, after, before = _line_filters(get, errors)
    page_size = _page_size(get("page_size"), default_page_size, max_page_size, errors)
    search_after = None
    cursor = get("cursor")
    if cursor:
        search_after = decode_cursor(cursor)
        if search_after is None:
            errors["cursor"] = [INVALID_CURSOR]
    if errors:
        raise InvalidAuditQuery(errors)
    query = LogQuery(execution_id=execution_id, tenant_id=tenant_id)
    return replace(query, attempt=attempt, min_level=level, text=text, after=after,
                   before=before, page_size=page_size, search_after=search_after)


def _line_filters(get, errors: dict[str, list[str]]
                  ) -> tuple[str | None, str, datetime | None, datetime | None]:
    """``level``, ``q``, ``after`` and ``before``, checked as both reads check them."""
    level = get("level").strip().lower() or None
    if level == "warn":
        level = "warning"
    if level is not None and level not in LEVELS:
        errors["level"] = [f"'{level[:32]}' is not a level; use one of: {', '.join(LEVELS)} "
                           "(that level and above)."]
    text = get("q").strip()
    if len(text) > MAX_TEXT_CHARS:
        errors["q"] = [f"At most {MAX_TEXT_CHARS} characters."]
    after = _datetime(get("after"), "after", errors)
    before = _datetime(get("before"), "before", errors)
    if after and before and after >= before:
        errors["before"] = ["Must be later than after."]
    return level, text, after, before


# -- a tenant's lines across its executions -------------------------------------------------------

SearchCursor = tuple[int, str, int, int]  # @timestamp ms, execution id, attempt, sequence


@dataclass(frozen=True)
class LogSearch:
    """One page of a tenant's log lines across its executions, newest first unless ``order``
    is ``asc``."""

    tenant_id: str
    job_id: str | None = None
    execution_id: str | None = None
    min_level: str | None = None
    text: str = ""
    after: datetime | None = None
    before: datetime | None = None
    order: str = "desc"
    page_size: int = 50
    search_after: SearchCursor | None = None
    hidden_fields: tuple[str, ...] = ()

    def body(self) -> dict[str, Any]:
        filters: list[dict[str, Any]] = [{"term": {"chrono.tenant_id": self.tenant_id}}]
        if self.job_id:
            filters.append({"term": {"chrono.job_id": self.job_id}})
        if self.execution_id:
            filters.append({"term": {"chrono.execution_id": self.execution_id}})
        body: dict[str, Any] = {
            "query": _bool_query(filters, min_level=self.min_level, after=self.after,
                                 before=self.before, text=self.text),
            "sort": [{field: {"order": self.order}} for field in (
                "@timestamp", "chrono.execution_id", "chrono.attempt", "event.sequence")],
            "size": self.page_size + 1,
            "track_total_hits": SEARCH_COUNT_LIMIT,
        }
        if self.search_after is not None:
            body["search_after"] = list(self.search_after)
        if self.hidden_fields:
            body["_source"] = {"excludes": list(self.hidden_fields)}
        return body


@dataclass(frozen=True)
class LogSearchPage:
    lines: list[dict[str, Any]]
    total: int
    total_is_exact: bool
    next_cursor: str | None


def read_search_page(search: LogSearch, reply: Mapping[str, Any]) -> LogSearchPage:
    """The :class:`LogSearchPage` of ``reply``, the engine's answer to ``search.body()``."""
    hits = reply.get("hits") or {}
    rows = list(hits.get("hits") or [])
    next_cursor = None
    if len(rows) > search.page_size:
        rows = rows[: search.page_size]
        next_cursor = encode_cursor(rows[-1]["sort"])
    total = hits.get("total") or {}
    return LogSearchPage(
        lines=[searched_line_of(row.get("_source", {})) for row in rows],
        total=int(total.get("value", len(rows))) if isinstance(total, dict) else int(total),
        total_is_exact=not isinstance(total, dict) or total.get("relation", "eq") == "eq",
        next_cursor=next_cursor,
    )


def searched_line_of(source: Mapping[str, Any]) -> dict[str, Any]:
    """A line of a search across executions: :func:`line_of` and whose line it is."""
    chrono = source.get("chrono") or {}
    return {"execution_id": chrono.get("execution_id"), "job_id": chrono.get("job_id"),
            "job_type": chrono.get("job_type"), **line_of(source)}


def parse_log_search(
    params: Mapping[str, Any],
    *,
    tenant_id: str,
    default_page_size: int,
    max_page_size: int,
) -> LogSearch:
    """A :class:`LogSearch` of ``tenant_id``'s lines from ``params``; raises
    :class:`InvalidAuditQuery` naming every parameter at fault."""
    errors: dict[str, list[str]] = {}
    for name in sorted(set(params) - set(SEARCH_PARAMETERS) - {"format"}):
        errors[name] = [f"Unknown query parameter; allowed: "
                        f"{', '.join(sorted(SEARCH_PARAMETERS))}."]
    get = _getter(params)
    job_id = _uuid(get("job"), "job", errors)
    execution_id = _uuid(get("execution"), "execution", errors)
    level, text, after, before = _line_filters(get, errors)
    order = get("order") or "desc"
    if order not in ORDERS:
        errors["order"] = ["Use desc (newest first, the default) or asc (oldest first)."]
    page_size = _page_size(get("page_size"), default_page_size, max_page_size, errors)
    search_after = None
    cursor = get("cursor")
    if cursor:
        search_after = decode_search_cursor(cursor)
        if search_after is None:
            errors["cursor"] = [INVALID_CURSOR]
    if errors:
        raise InvalidAuditQuery(errors)
    return LogSearch(tenant_id=tenant_id, job_id=job_id, execution_id=execution_id,
                     min_level=level, text=text, after=after, before=before, order=order,
                     page_size=page_size, search_after=search_after)


def decode_search_cursor(cursor: str) -> SearchCursor | None:
    """The search_after values in ``cursor``, or None when it is not one a search wrote
    (the engine would refuse other values: a 503 for what is the client's mistake)."""
    if len(cursor) > MAX_SEARCH_CURSOR_CHARS or not cursor.isascii():
        return None
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        values = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not (isinstance(values, list) and len(values) == 4):
        return None
    timestamp_ms, execution_id, attempt, sequence = values
    if not (type(timestamp_ms) is int and 0 <= timestamp_ms <= MAX_CURSOR_TIMESTAMP_MS
            and type(attempt) is int and 0 <= attempt <= MAX_ATTEMPT
            and type(sequence) is int and 0 <= sequence <= MAX_CURSOR_SEQUENCE
            and isinstance(execution_id, str)):
        return None
    try:
        uuid.UUID(execution_id)
    except ValueError:
        return None
    return timestamp_ms, execution_id, attempt, sequence
