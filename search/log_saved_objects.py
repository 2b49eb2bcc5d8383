"""Saved objects for the execution-log data stream (``logs-chrono.execution-*``): a data view, a
saved search of the lines, a histogram of lines by level, a table of the loudest jobs, and a
dashboard of them, for Kibana 8.8+ and OpenSearch Dashboards 2.x, as ndjson files in
``search/kibana/`` (written with the audit's by ``python -m search.saved_objects``; a test
checks the files are this module's output and every field they name is mapped by
:data:`search.log_stream.MAPPINGS`).

An execution's lines: filter the saved search on ``chrono.execution_id`` (its id in the admin or
the API), sorted by ``chrono.attempt`` and ``event.sequence``.
"""

from __future__ import annotations

from typing import Any

from search.log_stream import DATASET
from search.saved_objects import (
    INDEX_REF,
    KIBANA_DIR,
    _count,
    _search_source,
    _terms,
    _visualization,
    dashboard,
    export_ndjson,
    over_time_by,
    versioned,
)

FILES = {
    "kibana": KIBANA_DIR / "chrono-execution-logs.kibana.ndjson",
    "opensearch-dashboards": KIBANA_DIR / "chrono-execution-logs.opensearch-dashboards.ndjson",
}
DATA_VIEW_ID = "chrono-execution-logs"
SEARCH_ID = "chrono-execution-log-lines"
BY_LEVEL_ID = "chrono-execution-logs-by-level"
LOUDEST_ID = "chrono-execution-logs-loudest-jobs"
DASHBOARD_ID = "chrono-execution-logs-dashboard"
TITLE_PATTERN = f"logs-{DATASET}-*"
SEARCH_COLUMNS = ["chrono.attempt", "log.level", "log.logger", "message", "chrono.job_type",
                  "chrono.execution_id", "chrono.tenant_id"]


def saved_objects(flavour: str) -> list[dict[str, Any]]:
    if flavour not in FILES:
        raise ValueError(f"flavour must be one of {', '.join(FILES)}")
    objects = [
        _data_view(),
        _saved_search(),
        _visualization(BY_LEVEL_ID, "Chrono execution logs: lines by level", _by_level(),
                       data_view_id=DATA_VIEW_ID),
        _visualization(LOUDEST_ID, "Chrono execution logs: errors by job type", _loudest(),
                       query='log.level : "error" or log.level : "critical"',
                       data_view_id=DATA_VIEW_ID),
        dashboard(
            flavour, dashboard_id=DASHBOARD_ID, title="Chrono execution logs",
            description="What tasks logged while they ran: lines by level, the job types "
                        "logging errors, and the lines themselves (filter on "
                        "chrono.execution_id for one execution).",
            panels_spec=[
                ("visualization", BY_LEVEL_ID, {"x": 0, "y": 0, "w": 32, "h": 14}),
                ("visualization", LOUDEST_ID, {"x": 32, "y": 0, "w": 16, "h": 14}),
                ("search", SEARCH_ID, {"x": 0, "y": 14, "w": 48, "h": 30}),
            ]),
    ]
    return [versioned(obj, flavour) for obj in objects]


def ndjson(flavour: str) -> str:
    return export_ndjson(saved_objects(flavour))


def write_files() -> None:
    KIBANA_DIR.mkdir(exist_ok=True)
    for flavour, path in FILES.items():
        path.write_text(ndjson(flavour))


def _data_view() -> dict[str, Any]:
    return {
        "id": DATA_VIEW_ID,
        "type": "index-pattern",
        "attributes": {
            "title": TITLE_PATTERN,
            "name": "Chrono execution logs",
            "timeFieldName": "@timestamp",
            "fields": "[]",
            "fieldFormatMap": "{}",
        },
        "references": [],
    }


def _saved_search() -> dict[str, Any]:
    return {
        "id": SEARCH_ID,
        "type": "search",
        "attributes": {
            "title": "Chrono execution log lines",
            "description": "Every line tasks logged, newest first; filter on "
                           "chrono.execution_id and sort by chrono.attempt and event.sequence "
                           "for one execution's log in order.",
            "columns": SEARCH_COLUMNS,
            "sort": [["@timestamp", "desc"]],
            "kibanaSavedObjectMeta": _search_source(),
        },
        "references": [{"id": DATA_VIEW_ID, "name": INDEX_REF, "type": "index-pattern"}],
    }


def _by_level() -> dict[str, Any]:
    return over_time_by("log.level", 5)


def _loudest() -> dict[str, Any]:
    return {
        "type": "table",
        "params": {"perPage": 10, "showPartialRows": False, "showMetricsAtAllLevels": False},
        "aggs": [_count(), _terms("2", "chrono.job_type", "bucket", 20),
                 _terms("3", "chrono.tenant_id", "bucket", 5)],
    }
