"""The saved objects of the execution-log data stream in ``search/kibana/``: the files are what
the generator writes, every reference resolves inside a file, and every field they name is
mapped by the stream's template (and by the engine, for the stream it holds)."""

from __future__ import annotations

import fnmatch
import json

import pytest

from chronocore.config import get_config
from search.index_template import field_names
from search.log_saved_objects import FILES, TITLE_PATTERN, ndjson
from search.log_stream import MAPPINGS, LogStream, install, uninstall
from tests.integration.test_audit_saved_objects import AGGREGATABLE, fields_used

pytest_plugins = ["tests.integration.audit_fixtures"]


def load(flavour: str) -> list[dict]:
    objects = [json.loads(line) for line in FILES[flavour].read_text().splitlines() if line]
    summary = objects.pop()
    assert summary["exportedCount"] == len(objects) and summary["missingRefCount"] == 0
    return objects


@pytest.mark.parametrize("flavour", sorted(FILES))
def test_the_shipped_file_is_what_the_generator_writes(flavour):
    assert FILES[flavour].read_text() == ndjson(flavour), (
        "run `python -m search.saved_objects` and commit the files")


@pytest.mark.parametrize("flavour", sorted(FILES))
def test_every_reference_resolves_and_every_field_is_mapped(flavour):
    objects = load(flavour)
    by_key = {(obj["type"], obj["id"]): obj for obj in objects}
    assert {obj["type"] for obj in objects} >= {"index-pattern", "search", "visualization",
                                                  "dashboard"}
    mapped = field_names(MAPPINGS)
    for obj in objects:
        for reference in obj["references"]:
            assert (reference["type"], reference["id"]) in by_key, (obj["id"], reference)
        for name in fields_used(obj):
            assert name in mapped, f"{obj['id']} names {name}, which the template does not map"
            if obj["type"] == "visualization":
                assert mapped[name] in AGGREGATABLE, (obj["id"], name)
    (data_view,) = [o for o in objects if o["type"] == "index-pattern"]
    assert data_view["attributes"]["title"] == TITLE_PATTERN
    assert fnmatch.fnmatch(LogStream("default").name, TITLE_PATTERN)


def test_the_fields_are_mapped_in_the_stream_the_engine_holds(search_client, audit_stream):
    stream = LogStream(audit_stream.namespace)
    install(search_client, get_config(), stream)
    try:
        (index_mapping, *_) = search_client.mapping(stream.name).values()
    finally:
        uninstall(search_client, stream)
    in_engine = field_names(index_mapping["mappings"])
    for flavour in FILES:
        for obj in load(flavour):
            for name in fields_used(obj):
                assert name in in_engine, (flavour, obj["id"], name)
