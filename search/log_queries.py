"""Reading one execution's log lines: query-string parameters in, engine query out, a page back.

:func:`parse_log_query` is pure: it validates the parameters of ``GET /api/v1/executions/{id}/
logs/`` (and the admin page's) into a :class:`LogQuery`, collecting every problem per parameter
in :class:`InvalidAuditQuery` (the family's error for a bad search). The tenant and the execution
are never parameters: the caller puts the execution it looked up in the tenant's rows, and the
tenant, into every query as filter clauses the text cannot widen.

Lines come in the order they were logged: by attempt, then by sequence (the capture numbers an
attempt's lines from 1); a cursor holds the last line's (attempt, sequence). ``follow`` is the
cursor after the last line returned, given even on the last page, so a client following a
running execution asks again with it and gets only the lines written since.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from search.errors import InvalidAuditQuery
from search.log_stream import LEVELS
from search.queries import (
    INVALID_CURSOR,
    MAX_TEXT_CHARS,
    _datetime,
    _getter,
    _page_size,
    decode_cursor,
    encode_cursor,
    time_range_filter,
)

PARAMETERS = ("attempt", "level", "q", "after", "before", "page_size", "cursor")
TEXT_FIELDS = ("message", "error.message", "error.type", "log.logger")
MAX_ATTEMPT = 1_000_000


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
        if self.min_level:
            filters.append({"terms": {"log.level": list(LEVELS[LEVELS.index(self.min_level):])}})
        if self.after or self.before:
            filters.append(time_range_filter(self.after, self.before))
        query: dict[str, Any] = {"filter": filters}
        if self.text:
            query["must"] = [{"simple_query_string": {
                "query": self.text, "fields": list(TEXT_FIELDS), "default_operator": "and",
                "lenient": True}}]
        body: dict[str, Any] = {
            "query": {"bool": query},
            "sort": [{"chrono.attempt": "asc"}, {"event.sequence": "asc"}],
            "size": self.page_size + 1,
            "track_total_hits": True,
        }
        if self.search_after is not None:
            body["search_after"] = list(self.search_after)
        if self.hidden_fields:
            body["_source"] = {"excludes": list(self.hidden_fields)}
        return body


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
    level = get("level").strip().lower() or None
    if level == "warn":
        level = "warning"
    if level is not None and level not in LEVELS:
        errors["level"] = [f"Use one of: {', '.join(LEVELS)} (that level and above)."]
    text = get("q").strip()
    if len(text) > MAX_TEXT_CHARS:
        errors["q"] = [f"At most {MAX_TEXT_CHARS} characters."]
    after = _datetime(get("after"), "after", errors)
    before = _datetime(get("before"), "before", errors)
    if after and before and after >= before:
        errors["before"] = ["Must be later than after."]
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
