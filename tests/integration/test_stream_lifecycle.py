"""Chrono's own lifecycle for the data streams, against the real search engine (which, here, has
no ISM plugin: the case it exists for). A stream is rolled over once its write index is a day
old, an index is deleted once it was rolled over longer ago than the retention, the write index
and the documents of the days kept stay, a dry run changes nothing, and an engine that cannot
be reached fails the pass's stream step without stopping PostgreSQL's retention."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
from django.core.management import CommandError, call_command

from chronocore.config import get_config
from scheduler.retention import run_retention
from search import log_stream, stream_lifecycle
from search.index_template import ISM_PLUGIN
from search.log_stream import LogStream
from search.stream_lifecycle import DAY_MS, Rules

pytest_plugins = ["tests.integration.audit_fixtures"]

RULES = Rules.from_ism_policy(log_stream.ISM_POLICY_FILE, 3)


@pytest.fixture
def stream(search_client):
    config = dataclasses.replace(get_config(), audit_namespace=f"t{uuid.uuid4().hex[:12]}",
                                 audit_index_replicas=0, execution_log_retention_days=3)
    stream = log_stream.install(search_client, config, LogStream.from_config(config))
    try:
        yield stream, config
    finally:
        log_stream.uninstall(search_client, stream)


def index_lines(client, stream: LogStream, *names: str) -> None:
    client.bulk_create(stream.name, [(name, {"@timestamp": "2026-12-03T12:00:00Z",
                                             "message": name}) for name in names])
    client.refresh(stream.name)


def messages(client, stream: LogStream) -> set[str]:
    hits = client.search(stream.name, {"size": 100, "query": {"match_all": {}}})
    return {hit["_source"]["message"] for hit in hits["hits"]["hits"]}


def test_a_stream_rolls_over_daily_and_loses_only_its_indices_past_the_retention(
        search_client, stream):
    stream, _ = stream
    assert stream_lifecycle.engine_lifecycle(search_client) is None  # no ISM here
    assert ISM_PLUGIN not in search_client.plugin_names()
    now = int(time.time() * 1000)
    # A write index younger than a day, or empty, is left alone.
    assert stream_lifecycle.apply(search_client, stream, RULES, at_ms=now).lines(
        dry_run=False) == [f"data stream {stream.name}: nothing to roll over or delete"]
    first = search_client.data_stream_indices(stream.name)
    index_lines(search_client, stream, "day one")
    assert stream_lifecycle.apply(search_client, stream, RULES,
                                  at_ms=now + DAY_MS - 60_000).rolled_over_to is None

    rolled = stream_lifecycle.apply(search_client, stream, RULES, at_ms=now + DAY_MS)
    second = search_client.data_stream_indices(stream.name)
    assert rolled.rolled_over_to == second[-1] and second[:-1] == first and len(second) == 2
    assert rolled.deleted == []
    index_lines(search_client, stream, "day two")

    # The first index stopped being written when the second was made (about now): kept until
    # three days after that, then deleted; the write index and its lines stay.
    kept = stream_lifecycle.apply(search_client, stream, RULES,
                                  at_ms=now + 3 * DAY_MS - 60_000, dry_run=True)
    assert kept.deleted == [] and search_client.data_stream_indices(stream.name) == second
    gone = stream_lifecycle.apply(search_client, stream, RULES, at_ms=now + 4 * DAY_MS)
    assert gone.deleted == [first[0]]
    remaining = search_client.data_stream_indices(stream.name)
    # The second index, days old by that clock and holding a line, rolled over in turn; it was
    # written to until now, so it stays for three more days.
    assert remaining == [second[-1], gone.rolled_over_to]
    assert messages(search_client, stream) == {"day two"}


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(search_client, stream):
    stream, _ = stream
    index_lines(search_client, stream, "a line")
    before = search_client.data_stream_indices(stream.name)
    outcome = stream_lifecycle.apply(search_client, stream, RULES,
                                     at_ms=int(time.time() * 1000) + 2 * DAY_MS, dry_run=True)
    assert outcome.rolled_over_to and outcome.lines(dry_run=True) == [
        f"would roll data stream {stream.name} over to a new write index"]
    assert search_client.data_stream_indices(stream.name) == before
    assert messages(search_client, stream) == {"a line"}


@pytest.mark.django_db
def test_the_retention_pass_applies_it_to_the_deployments_streams(search_client, stream):
    stream, config = stream
    index_lines(search_client, stream, "a line")
    before = search_client.data_stream_indices(stream.name)
    report = run_retention(config, streams_at_ms=int(time.time() * 1000) + 2 * DAY_MS)
    by_name = {outcome.stream: outcome for outcome in report.streams}
    audit_name = f"logs-chrono.audit-{config.audit_namespace}"
    assert set(by_name) == {stream.name, audit_name}
    assert by_name[audit_name].managed_by == "absent"  # this namespace has no audit stream
    assert by_name[stream.name].managed_by == "chrono"
    after = search_client.data_stream_indices(stream.name)
    assert after[:-1] == before and by_name[stream.name].rolled_over_to == after[-1]
    assert f"roll data stream {stream.name} over to {after[-1]}" in report.lines()
    assert report.as_dict()["streams"][0]["stream"] in by_name


@pytest.mark.django_db
def test_an_engine_out_of_reach_fails_the_stream_step_alone():
    config = dataclasses.replace(get_config(), search_url="http://127.0.0.1:9",
                                 audit_namespace=f"t{uuid.uuid4().hex[:12]}")
    report = run_retention(config)
    assert report.ran and not report.failed  # PostgreSQL's part was done
    assert len(report.streams_failed) == 2
    assert all("127.0.0.1:9" in outcome.error for outcome in report.streams_failed)
    assert any(line.startswith("failed on data stream logs-chrono.execution-")
               for line in report.lines())


@pytest.mark.django_db
def test_chrono_retention_exits_non_zero_when_a_stream_could_not_be_changed(monkeypatch):
    from scheduler.management.commands import retention as command

    unreachable = dataclasses.replace(get_config(), search_url="http://127.0.0.1:9")
    monkeypatch.setattr(command, "get_config", lambda: unreachable)
    with pytest.raises(CommandError, match="2 data streams could not be changed"):
        call_command("retention")
