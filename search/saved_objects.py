"""Saved objects for the audit data stream: a data view, a saved search and a dashboard, for Kibana
(8.8 or later) and for OpenSearch Dashboards (2.x), as the ndjson files their import screens take.

The files in ``search/kibana/`` are what ships; this module writes them
(``python -m search.saved_objects``) and a test checks that the files are its output and that every
reference and field name in them resolves (against :data:`search.index_template.MAPPINGS`).
The two flavours differ in their migration metadata and in how a dashboard names its panel
references (Kibana 8: ``<panelIndex>:panel_<panelIndex>``; OpenSearch Dashboards: ``panel_<n>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from search.index_template import DATASET

KIBANA_DIR = Path(__file__).with_name("kibana")
FILES = {
    "kibana": KIBANA_DIR / "chrono-audit.kibana.ndjson",
    "opensearch-dashboards": KIBANA_DIR / "chrono-audit.opensearch-dashboards.ndjson",
}
DATA_VIEW_ID = "chrono-audit"
SEARCH_ID = "chrono-audit-events"
DASHBOARD_ID = "chrono-audit-dashboard"
BY_ACTION_ID = "chrono-audit-events-by-action"
BY_OUTCOME_ID = "chrono-audit-outcomes"
FAILURES_ID = "chrono-audit-failures-by-job-type"
TITLE_PATTERN = f"logs-{DATASET}-*"
SEARCH_COLUMNS = ["event.action", "event.outcome", "chrono.tenant_id", "chrono.job_id",
                  "chrono.actor", "message"]
INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"

_KIBANA_CORE = "8.8.0"
_KIBANA_TYPES = {"index-pattern": "8.0.0", "search": "8.0.0", "visualization": "8.5.0",
                 "dashboard": "8.7.0"}
_OSD_TYPES = {"index-pattern": "7.6.0", "search": "7.9.3", "visualization": "7.10.0",
              "dashboard": "7.9.3"}


def saved_objects(flavour: str) -> list[dict[str, Any]]:
    """The objects of ``flavour`` ("kibana" or "opensearch-dashboards"), data view first."""
    if flavour not in FILES:
        raise ValueError(f"flavour must be one of {', '.join(FILES)}")
    objects = [
        _data_view(),
        _saved_search(),
        _visualization(BY_ACTION_ID, "Chrono audit: events by action", _by_action()),
        _visualization(BY_OUTCOME_ID, "Chrono audit: outcomes", _by_outcome()),
        _visualization(FAILURES_ID, "Chrono audit: failures by job type", _failures(),
                       query="event.outcome : \"failure\""),
        _dashboard(flavour),
    ]
    return [versioned(obj, flavour) for obj in objects]


def ndjson(flavour: str) -> str:
    return export_ndjson(saved_objects(flavour))


def export_ndjson(objects: list[dict[str, Any]]) -> str:
    """Saved objects as Kibana's export file: one object a line, then the export's summary."""
    summary = {"exportedCount": len(objects), "missingRefCount": 0, "missingReferences": []}
    return "".join(json.dumps(obj, sort_keys=True) + "\n" for obj in [*objects, summary])


def write_files() -> None:
    from search import log_saved_objects  # beside the audit's: one command writes both

    KIBANA_DIR.mkdir(exist_ok=True)
    for flavour, path in FILES.items():
        path.write_text(ndjson(flavour))
    log_saved_objects.write_files()


# ------------------------------------------------------------------------------------- objects


def _data_view() -> dict[str, Any]:
    return {
        "id": DATA_VIEW_ID,
        "type": "index-pattern",
        "attributes": {
            "title": TITLE_PATTERN,
            "name": "Chrono audit log",
            "timeFieldName": "@timestamp",
            "fields": "[]",
            "fieldFormatMap": json.dumps({"event.duration": {"id": "duration", "params": {
                "inputFormat": "nanoseconds", "outputFormat": "humanizePrecise"}}}),
        },
        "references": [],
    }


def _search_source(query: str = "") -> dict[str, Any]:
    return {"searchSourceJSON": json.dumps({
        "query": {"query": query, "language": "kuery"},
        "filter": [],
        "indexRefName": INDEX_REF,
    })}


def _index_reference(data_view_id: str = DATA_VIEW_ID) -> list[dict[str, str]]:
    return [{"id": data_view_id, "name": INDEX_REF, "type": "index-pattern"}]


def _saved_search() -> dict[str, Any]:
    return {
        "id": SEARCH_ID,
        "type": "search",
        "attributes": {
            "title": "Chrono audit events",
            "description": "Every state change of jobs, executions and workers, newest first.",
            "columns": SEARCH_COLUMNS,
            "sort": [["@timestamp", "desc"]],
            "kibanaSavedObjectMeta": _search_source(),
        },
        "references": _index_reference(),
    }


def _count() -> dict[str, Any]:
    return {"id": "1", "enabled": True, "type": "count", "params": {}, "schema": "metric"}


def _terms(agg_id: str, field: str, schema: str, size: int) -> dict[str, Any]:
    return {"id": agg_id, "enabled": True, "type": "terms", "schema": schema,
            "params": {"field": field, "size": size, "order": "desc", "orderBy": "1"}}


def over_time_by(field: str, size: int) -> dict[str, Any]:
    """A histogram of the documents over time, split by the ``size`` commonest ``field``s."""
    return {
        "type": "histogram",
        "params": {"type": "histogram", "addLegend": True, "addTooltip": True,
                   "legendPosition": "right"},
        "aggs": [
            _count(),
            {"id": "2", "enabled": True, "type": "date_histogram", "schema": "segment",
             "params": {"field": "@timestamp", "interval": "auto", "min_doc_count": 1,
                        "extended_bounds": {}}},
            _terms("3", field, "group", size),
        ],
    }


def _by_action() -> dict[str, Any]:
    return over_time_by("event.action", 25)


def _by_outcome() -> dict[str, Any]:
    return {
        "type": "pie",
        "params": {"type": "pie", "isDonut": True, "addLegend": True, "addTooltip": True,
                   "legendPosition": "right"},
        "aggs": [_count(), _terms("2", "event.outcome", "segment", 5)],
    }


def _failures() -> dict[str, Any]:
    return {
        "type": "table",
        "params": {"perPage": 10, "showPartialRows": False, "showMetricsAtAllLevels": False},
        "aggs": [_count(), _terms("2", "chrono.job_type", "bucket", 20),
                 _terms("3", "error.type", "bucket", 5)],
    }


def _visualization(
    vis_id: str, title: str, vis_state: dict[str, Any], *, query: str = "",
    data_view_id: str = DATA_VIEW_ID,
) -> dict[str, Any]:
    return {
        "id": vis_id,
        "type": "visualization",
        "attributes": {
            "title": title,
            "description": "",
            "visState": json.dumps({"title": title, **vis_state}),
            "uiStateJSON": "{}",
            "version": 1,
            "kibanaSavedObjectMeta": _search_source(query),
        },
        "references": _index_reference(data_view_id),
    }


def _dashboard(flavour: str) -> dict[str, Any]:
    return dashboard(
        flavour,
        dashboard_id=DASHBOARD_ID,
        title="Chrono audit",
        description="What happened to jobs, executions and workers: counts by action and "
                    "outcome, failures by job type, and the events themselves.",
        panels_spec=[
            ("visualization", BY_ACTION_ID, {"x": 0, "y": 0, "w": 32, "h": 14}),
            ("visualization", BY_OUTCOME_ID, {"x": 32, "y": 0, "w": 16, "h": 14}),
            ("visualization", FAILURES_ID, {"x": 0, "y": 14, "w": 48, "h": 12}),
            ("search", SEARCH_ID, {"x": 0, "y": 26, "w": 48, "h": 24}),
        ],
    )


def dashboard(
    flavour: str, *, dashboard_id: str, title: str, description: str,
    panels_spec: list[tuple[str, str, dict[str, int]]],
) -> dict[str, Any]:
    """A dashboard of ``panels_spec`` (kind, object id, grid position) in ``flavour``."""
    panels, references = [], []
    for number, (kind, object_id, grid) in enumerate(panels_spec, start=1):
        index = str(number)
        ref_name = f"panel_{index}"
        panel = {"panelIndex": index, "gridData": {**grid, "i": index}, "embeddableConfig": {},
                 "panelRefName": ref_name}
        if flavour == "kibana":
            panel["type"], panel["version"] = kind, _KIBANA_CORE
            references.append({"id": object_id, "name": f"{index}:{ref_name}", "type": kind})
        else:
            panel["version"] = "2.19.0"
            references.append({"id": object_id, "name": ref_name, "type": kind})
        panels.append(panel)
    return {
        "id": dashboard_id,
        "type": "dashboard",
        "attributes": {
            "title": title,
            "description": description,
            "panelsJSON": json.dumps(panels),
            "optionsJSON": json.dumps({"useMargins": True, "hidePanelTitles": False}),
            "timeRestore": True,
            "timeFrom": "now-24h",
            "timeTo": "now",
            "refreshInterval": {"pause": False, "value": 60_000},
            "version": 1,
            "kibanaSavedObjectMeta": {"searchSourceJSON": json.dumps(
                {"query": {"query": "", "language": "kuery"}, "filter": []})},
        },
        "references": references,
    }


def versioned(obj: dict[str, Any], flavour: str) -> dict[str, Any]:
    if flavour == "kibana":
        return {**obj, "coreMigrationVersion": _KIBANA_CORE,
                "typeMigrationVersion": _KIBANA_TYPES[obj["type"]], "managed": False}
    return {**obj, "migrationVersion": {obj["type"]: _OSD_TYPES[obj["type"]]}}


if __name__ == "__main__":
    write_files()
