"""The execution-log data stream's retention policy: hot, rolled over daily, deleted after the
configured days (ILM and ISM bodies), installed by the shipper's install as the audit stream's
is, idempotently, against the real engine."""

from __future__ import annotations

import dataclasses
import logging
import uuid

from chronocore.config import get_config
from search import log_stream
from search.index_template import ISM_PLUGIN, ilm_policy, ism_policy
from search.log_stream import LogStream

pytest_plugins = ["tests.integration.audit_fixtures"]


def test_the_log_policies_go_from_hot_to_delete_after_the_configured_days():
    stream = LogStream("default")
    ilm = ilm_policy(5, path=log_stream.ILM_POLICY_FILE)["policy"]
    assert set(ilm["phases"]) == {"hot", "delete"}
    assert ilm["phases"]["delete"] == {"min_age": "5d", "actions": {"delete": {}}}
    assert ilm["phases"]["hot"]["actions"]["rollover"]["max_age"] == "1d"
    ism = ism_policy(stream, 5, path=log_stream.ISM_POLICY_FILE)["policy"]
    assert [state["name"] for state in ism["states"]] == ["hot", "delete"]
    assert ism["states"][0]["transitions"] == [
        {"state_name": "delete", "conditions": {"min_rollover_age": "5d"}}]
    assert ism["ism_template"][0]["index_patterns"] == [".ds-logs-chrono.execution-default-*"]
    assert stream.policy_name == "chrono-execution-logs-default"
    # Elasticsearch: the template names the ILM policy; OpenSearch's ISM attaches by pattern.
    template = log_stream.index_template(stream, shards=1, replicas=0,
                                         ilm_policy=stream.policy_name)
    assert template["template"]["settings"]["index"]["lifecycle"] == {
        "name": "chrono-execution-logs-default"}
    assert "lifecycle" not in log_stream.index_template(stream, shards=1, replicas=0)[
        "template"]["settings"]["index"]


def test_the_audit_policy_keeps_its_warm_phase_and_period():
    assert set(ilm_policy(30)["policy"]["phases"]) == {"hot", "warm", "delete"}


def test_install_is_idempotent_and_says_when_the_engine_applies_no_retention(
        search_client, caplog):
    stream = LogStream(f"t{uuid.uuid4().hex[:12]}")
    config = dataclasses.replace(get_config(), execution_log_retention_days=3,
                                 audit_index_replicas=0)
    try:
        with caplog.at_level(logging.INFO):
            log_stream.install(search_client, config, stream)
            log_stream.install(search_client, config, stream)
        assert search_client.data_stream_indices(stream.name)
        assert ISM_PLUGIN not in search_client.plugin_names()  # the test node has no ISM
        warnings = [r.getMessage() for r in caplog.records
                    if "no Index State Management plugin" in r.getMessage()]
        assert len(warnings) == 2 and stream.name in warnings[0] and "3 days" in warnings[0]
    finally:
        log_stream.uninstall(search_client, stream)
