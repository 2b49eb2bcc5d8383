"""The Kibana and OpenSearch Dashboards saved objects in ``search/kibana/``: they parse, every
reference resolves inside the file, every field they name is mapped by the index template (and by
the engine, for the stream the indexer created), and the files are what the generator writes."""

from __future__ import annotations

import fnmatch
import json

import pytest

from search.index_template import AuditStream, field_names
from search.saved_objects import FILES, INDEX_REF, TITLE_PATTERN, ndjson

pytest_plugins = ["tests.integration.audit_fixtures"]

AGGREGATABLE = {"keyword", "date", "long", "integer"}


def load(flavour: str) -> list[dict]:
    lines = FILES[flavour].read_text().splitlines()
    objects = [json.loads(line) for line in lines if line.strip()]
    summary = objects.pop()
    assert summary["exportedCount"] == len(objects)
    assert summary["missingRefCount"] == 0
    return objects


def fields_used(obj: dict) -> list[str]:
    attributes = obj["attributes"]
    if obj["type"] == "index-pattern":
        return [attributes["timeFieldName"], *json.loads(attributes["fieldFormatMap"])]
    if obj["type"] == "search":
        return [*attributes["columns"], *(field for field, _ in attributes["sort"])]
    if obj["type"] == "visualization":
        state = json.loads(attributes["visState"])
        return [agg["params"]["field"] for agg in state["aggs"] if "field" in agg["params"]]
    return []


@pytest.mark.parametrize("flavour", sorted(FILES))
def test_the_shipped_file_is_what_the_generator_writes(flavour):
    assert FILES[flavour].read_text() == ndjson(flavour), (
        "run `python -m search.saved_objects` and commit the files")


@pytest.mark.parametrize("flavour", sorted(FILES))
def test_a_data_view_a_saved_search_and_a_dashboard_whose_references_all_resolve(flavour):
    objects = load(flavour)
    by_key = {(obj["type"], obj["id"]): obj for obj in objects}
    assert len(by_key) == len(objects), "an id is used twice for one type"
    assert {obj["type"] for obj in objects} >= {"index-pattern", "search", "dashboard"}
    for obj in objects:
        for reference in obj["references"]:
            assert (reference["type"], reference["id"]) in by_key, (obj["id"], reference)
        source = json.loads(obj["attributes"].get("kibanaSavedObjectMeta", {}).get(
            "searchSourceJSON", "{}"))
        if "indexRefName" in source:
            assert source["indexRefName"] == INDEX_REF
            assert {r["name"] for r in obj["references"]} >= {INDEX_REF}
    (dashboard,) = [obj for obj in objects if obj["type"] == "dashboard"]
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    names = {r["name"] for r in dashboard["references"]}
    for panel in panels:
        expected = (f"{panel['panelIndex']}:{panel['panelRefName']}" if flavour == "kibana"
                    else panel["panelRefName"])
        assert expected in names, panel
    assert len(panels) == len(dashboard["references"]) == 4
    if flavour == "kibana":
        assert all(obj["coreMigrationVersion"] and obj["typeMigrationVersion"] for obj in objects)
    else:
        assert all(obj["migrationVersion"] for obj in objects)


@pytest.mark.parametrize("flavour", sorted(FILES))
def test_every_field_named_is_mapped_by_the_template_and_aggregatable_where_aggregated(flavour):
    mapped = field_names()
    for obj in load(flavour):
        for name in fields_used(obj):
            assert name in mapped, f"{obj['id']} names {name}, which the template does not map"
            if obj["type"] == "visualization":
                assert mapped[name] in AGGREGATABLE, (obj["id"], name, mapped[name])
    (data_view,) = [o for o in load(flavour) if o["type"] == "index-pattern"]
    assert data_view["attributes"]["title"] == TITLE_PATTERN
    assert fnmatch.fnmatch(AuditStream("default").name, TITLE_PATTERN)


def test_the_data_view_pattern_matches_the_stream_the_engine_holds_with_those_fields(
    search_client, audit_stream
):
    assert fnmatch.fnmatch(audit_stream.name, TITLE_PATTERN)
    (index_mapping, *_) = search_client.mapping(audit_stream.name).values()
    in_engine = field_names(index_mapping["mappings"])
    for flavour in FILES:
        for obj in load(flavour):
            for name in fields_used(obj):
                assert name in in_engine, (flavour, obj["id"], name)
