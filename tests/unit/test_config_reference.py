"""docs/configuration.md covers every field of ChronoConfig and is what ``chrono
config-reference`` writes: a new field without a description, or a changed default, fails
here until the page is generated again."""

from __future__ import annotations

import dataclasses

from chronocore import config_reference
from chronocore.config import ChronoConfig


def test_every_field_is_described_in_one_section():
    assert config_reference.undocumented() == []


def test_the_page_on_disk_is_the_generated_one():
    assert config_reference.PAGE.read_text() == config_reference.render(), (
        "docs/configuration.md is stale: run `chrono config-reference`")


def test_every_field_has_a_row_with_its_variable_and_default():
    page = config_reference.render()
    for field in dataclasses.fields(ChronoConfig):
        variable = field.name.upper() if field.name.endswith("_url") else \
            f"CHRONO_{field.name.upper()}"
        assert f"| `{variable}` |" in page, variable
    assert "| `CHRONO_SHARD_COUNT` | integer | `256` |" in page
    assert "| `CHRONO_ALLOWED_HOSTS` | comma-separated list | `127.0.0.1,localhost` |" in page
    assert "chronoadmin.settings_production" in page


def test_a_field_without_a_description_is_reported(monkeypatch):
    fewer = dict(config_reference.DESCRIPTIONS)
    del fewer["shard_count"]
    monkeypatch.setattr(config_reference, "DESCRIPTIONS", fewer | {"no_such_field": "x"})
    assert config_reference.undocumented() == [
        "shard_count: no description",
        "no_such_field: described, but ChronoConfig has no such field"]
