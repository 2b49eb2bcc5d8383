"""``GET /api/v1/audit/`` and ``GET /api/v1/logs/``: a tenant searches its own audit log, and
the log lines of its executions.

The tenant comes from the API key that authenticated the request and is a filter of every query
(:mod:`search.queries`, :mod:`search.log_queries`); no parameter can name another tenant, and
another tenant's job or execution id simply matches nothing. Audit documents are returned as
they are stored (ECS fields and ``chrono.*``, see docs/audit.md) but for a failure's stack
trace, newest first unless ``order=asc``, a page at a time; log lines as the per-execution
endpoint shows them, with the execution and job each belongs to.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import cache

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chronocore.config import ChronoConfig, get_config
from chronocore.rest.permissions import IsTenantClient, tenant_of
from chronocore.rest.throttling import TenantRateThrottle
from search.audit import ACTIONS
from search.client import SearchClient
from search.errors import SearchNotFound, SearchRequestError, SearchUnavailable
from search.index_template import AuditStream
from search.log_queries import (
    LogPage,
    LogQuery,
    LogSearch,
    LogSearchPage,
    parse_log_search,
    read_log_page,
    read_search_page,
)
from search.log_stream import LEVELS as LOG_LEVELS
from search.log_stream import LogStream
from search.queries import (
    OUTCOMES,
    AuditPage,
    AuditQuery,
    InvalidAuditQuery,
    parse_audit_query,
    read_page,
)

log = logging.getLogger("chrono.api")
# A tenant sees a failure's type and message; a traceback is for platform staff.
HIDDEN_FROM_TENANTS = ("error.stack_trace",)


class SearchEngineUnavailable(APIException):
    """Raised when the search engine does not answer or refuses the query (503)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "search_unavailable"
    default_detail = (
        "The audit log's search engine did not answer; retry shortly. Events are kept in "
        "PostgreSQL meanwhile and indexed once it is back."
    )


def search_client(config: ChronoConfig) -> SearchClient:
    """This process's client of the engine ``config`` names (one connection pool)."""
    return _client(config.search_url, config.search_api_key)


@cache
def _client(url: str, api_key: str) -> SearchClient:
    return SearchClient(url, api_key=api_key or None, read_timeout_s=30.0)


def run_search(query: AuditQuery, *, config: ChronoConfig, counts: bool = False) -> AuditPage:
    """Run ``query`` on the audit data stream ``config`` names; raises
    :class:`SearchEngineUnavailable`."""
    stream = AuditStream.from_config(config)
    try:
        reply = search_client(config).search(stream.name, query.body(counts=counts))
    except SearchNotFound:
        reply = {}  # no event indexed yet: the indexer creates the stream at its start
    except SearchUnavailable as exc:
        log.warning("audit search failed, engine unavailable: %s", exc)
        raise SearchEngineUnavailable() from None
    except SearchRequestError as exc:
        log.error("the engine refused an audit search: %s", exc)
        raise SearchEngineUnavailable("The search engine refused the query.") from None
    return read_page(query, reply)


def run_log_search(query: LogQuery, *, config: ChronoConfig) -> LogPage:
    """One page of an execution's log lines from the execution-log data stream ``config``
    names; raises :class:`SearchEngineUnavailable`."""
    return read_log_page(query, _search_logs(query.body(), config))


def run_tenant_log_search(search: LogSearch, *, config: ChronoConfig) -> LogSearchPage:
    """One page of a tenant's log lines across its executions; raises
    :class:`SearchEngineUnavailable`."""
    return read_search_page(search, _search_logs(search.body(), config))


def _search_logs(body: dict, config: ChronoConfig) -> dict:
    stream = LogStream.from_config(config)
    try:
        reply = search_client(config).search(stream.name, body)
    except SearchNotFound:
        reply = {}  # no line shipped yet: the shipper creates the stream at its start
    except SearchUnavailable as exc:
        log.warning("log search failed, engine unavailable: %s", exc)
        raise SearchEngineUnavailable(
            "The search engine holding execution logs did not answer; retry shortly.") from None
    except SearchRequestError as exc:
        log.error("the engine refused a log search: %s", exc)
        raise SearchEngineUnavailable("The search engine refused the query.") from None
    return reply


_PARAMETERS = [
    OpenApiParameter("q", OpenApiTypes.STR, description=(
        "Words to find in the message, error, action, actor, job type or name "
        "(simple query syntax: \"quoted phrase\", -exclude, prefix*).")),
    OpenApiParameter("job", OpenApiTypes.UUID, description="Only this job's events."),
    OpenApiParameter("execution", OpenApiTypes.UUID, description="Only this execution's events."),
    OpenApiParameter("action", OpenApiTypes.STR, enum=list(ACTIONS), many=True, explode=False,
                     description="One or more actions, comma separated."),
    OpenApiParameter("outcome", OpenApiTypes.STR, enum=list(OUTCOMES)),
    OpenApiParameter("after", OpenApiTypes.DATETIME,
                     description="Events at or after this time (ISO 8601)."),
    OpenApiParameter("before", OpenApiTypes.DATETIME,
                     description="Events before this time (ISO 8601)."),
    OpenApiParameter("order", OpenApiTypes.STR, enum=["desc", "asc"],
                     description="desc (newest first, the default) or asc (a history in order)."),
    OpenApiParameter("page_size", OpenApiTypes.INT),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="From the previous page's next."),
]
_PAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "description": "Events matching (at least, see below)."},
        "count_is_exact": {"type": "boolean"},
        "next": {"type": "string", "format": "uri", "nullable": True},
        "results": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": True,
                      "description": "An audit document: id, @timestamp, event.*, chrono.*, "
                                     "message, error.* (docs/audit.md)."},
        },
    },
}


class AuditSearchView(APIView):
    """Search the tenant's audit log: who did what to which job, and what became of it."""

    permission_classes = [IsTenantClient]
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="audit_search",
        tags=["audit"],
        parameters=_PARAMETERS,
        responses={200: OpenApiResponse(_PAGE_SCHEMA), 503: OpenApiResponse(
            description="The search engine did not answer.")},
    )
    def get(self, request: Request) -> Response:
        # A DRF view, built by the framework per request: the process edge, nothing to hand it
        # a configuration.
        config = get_config()
        try:
            query = parse_audit_query(
                request.query_params,
                tenant_id=str(tenant_of(request).tenant_id),
                default_page_size=config.api_default_page_size,
                max_page_size=config.api_max_page_size,
            )
        except InvalidAuditQuery as exc:
            raise ValidationError(exc.errors) from None
        page = run_search(replace(query, hidden_fields=HIDDEN_FROM_TENANTS), config=config)
        return _page_response(request, page.total, page.total_is_exact, page.next_cursor,
                              page.documents)


_LOG_SEARCH_PARAMETERS = [
    OpenApiParameter("job", OpenApiTypes.UUID, description="Only this job's lines."),
    OpenApiParameter("execution", OpenApiTypes.UUID,
                     description="Only this execution's lines."),
    OpenApiParameter("level", OpenApiTypes.STR, enum=list(LOG_LEVELS),
                     description="Lines at this level and above."),
    OpenApiParameter("q", OpenApiTypes.STR, description=(
        "Words to find in the message, the error or the logger's name (simple query syntax: "
        "\"quoted phrase\", -exclude, prefix*).")),
    OpenApiParameter("after", OpenApiTypes.DATETIME,
                     description="Lines logged at or after this time (ISO 8601)."),
    OpenApiParameter("before", OpenApiTypes.DATETIME,
                     description="Lines logged before this time (ISO 8601)."),
    OpenApiParameter("order", OpenApiTypes.STR, enum=["desc", "asc"],
                     description="desc (newest first, the default) or asc (oldest first)."),
    OpenApiParameter("page_size", OpenApiTypes.INT),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="From the previous page's next."),
]
_LOG_SEARCH_PAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer",
                  "description": "Lines matching, counted up to 10,000 (see count_is_exact)."},
        "count_is_exact": {"type": "boolean"},
        "next": {"type": "string", "format": "uri", "nullable": True},
        "results": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": True,
                      "description": "execution_id, job_id, job_type, timestamp, attempt, "
                                     "sequence, level, logger, message, error, thread, "
                                     "worker_id (and dropped_lines, dropped_bytes on the line "
                                     "saying what was dropped)."},
        },
    },
}


class LogSearchView(APIView):
    """Search the log lines of the tenant's executions: by job, execution, level, time, text."""

    permission_classes = [IsTenantClient]
    throttle_classes = [TenantRateThrottle]

    @extend_schema(
        operation_id="logs_search",
        tags=["executions"],
        parameters=_LOG_SEARCH_PARAMETERS,
        responses={200: OpenApiResponse(_LOG_SEARCH_PAGE_SCHEMA), 503: OpenApiResponse(
            description="The search engine did not answer.")},
    )
    def get(self, request: Request) -> Response:
        config = get_config()  # a DRF view: the process edge
        try:
            search = parse_log_search(
                request.query_params, tenant_id=str(tenant_of(request).tenant_id),
                default_page_size=config.api_default_page_size,
                max_page_size=config.api_max_page_size)
        except InvalidAuditQuery as exc:
            raise ValidationError(exc.errors) from None
        page = run_tenant_log_search(replace(search, hidden_fields=HIDDEN_FROM_TENANTS),
                                     config=config)
        return _page_response(request, page.total, page.total_is_exact, page.next_cursor,
                              page.lines)


def _page_response(request: Request, total: int, exact: bool, next_cursor: str | None,
                   results: list) -> Response:
    """A page of search results, ``next`` the same request with the next page's cursor."""
    next_url = None
    if next_cursor:
        params = request.query_params.copy()
        params["cursor"] = next_cursor
        next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
    return Response({"count": total, "count_is_exact": exact, "next": next_url,
                     "results": results})
