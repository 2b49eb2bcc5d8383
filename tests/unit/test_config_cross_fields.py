"""Settings that are each fine on their own but cannot hold together are refused at start, by a
message naming both variables and their values (chronocore/config.py, cross_field_problems)."""

from __future__ import annotations

import pytest

from chronocore.config import ChronoConfig, ConfigError, cross_field_problems, load_config


def test_the_defaults_hold_together():
    assert cross_field_problems(ChronoConfig()) == []


def test_the_test_suites_fast_failover_settings_hold_together():
    load_config({"CHRONO_SHARD_LEASE_TTL_MS": "2000", "CHRONO_ACK_DEADLINE_MS": "3000",
                 "CHRONO_LOOKAHEAD_MS": "1000", "CHRONO_SCAN_INTERVAL_MS": "200"})


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        pytest.param({"CHRONO_SHARD_LEASE_TTL_MS": "1500",
                      "CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS": "1000"},
                     "CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS=1000 must be at most half of "
                     "CHRONO_SHARD_LEASE_TTL_MS=1500", id="shard-lease-vs-ownership-refresh"),
        pytest.param({"CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS": "6000"},
                     "CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS=6000 must be at most half of "
                     "CHRONO_SHARD_LEASE_TTL_MS=2000", id="ownership-refresh-vs-shard-lease"),
        pytest.param({"CHRONO_TICK_MS": "250"},
                     "CHRONO_TICK_MS=250 must be at most a tenth of CHRONO_LOOKAHEAD_MS=2000",
                     id="tick-vs-lookahead"),
        pytest.param({"CHRONO_LOOKAHEAD_MS": "30000", "CHRONO_ACK_DEADLINE_MS": "30000"},
                     "CHRONO_LOOKAHEAD_MS=30000 must be smaller than CHRONO_ACK_DEADLINE_MS=30000",
                     id="lookahead-vs-ack-deadline"),
        pytest.param({"CHRONO_SCAN_INTERVAL_MS": "2000"},
                     "CHRONO_SCAN_INTERVAL_MS=2000 must be smaller than CHRONO_LOOKAHEAD_MS=2000",
                     id="scan-interval-vs-lookahead"),
        pytest.param({"CHRONO_PREPARE_AHEAD_MS": "1600"},
                     "CHRONO_PREPARE_AHEAD_MS=1600 plus CHRONO_SCAN_INTERVAL_MS=500 must be "
                     "smaller than CHRONO_LOOKAHEAD_MS=2000", id="prepare-ahead-vs-lookahead"),
        pytest.param({"CHRONO_WORKER_DEAD_AFTER_MISSED_HEARTBEATS": "1"},
                     "CHRONO_WORKER_DEAD_AFTER_MISSED_HEARTBEATS=1 times "
                     "CHRONO_WORKER_HEARTBEAT_INTERVAL_MS=5000 must span at least two heartbeats",
                     id="dead-after-one-heartbeat"),
        pytest.param({"CHRONO_API_DEFAULT_PAGE_SIZE": "600"},
                     "CHRONO_API_DEFAULT_PAGE_SIZE=600 must not exceed "
                     "CHRONO_API_MAX_PAGE_SIZE=500",
                     id="default-page-vs-max-page"),
    ],
)
def test_settings_that_cannot_hold_together_are_refused_naming_both(environ, named):
    with pytest.raises(ConfigError) as refused:
        load_config(environ)
    assert named in str(refused.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as refused:
        load_config({"CHRONO_TICK_MS": "250", "CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS": "1500"})
    message = str(refused.value)
    assert "CHRONO_TICK_MS=250" in message
    assert "CHRONO_OWNERSHIP_REFRESH_INTERVAL_MS=1500" in message
    assert len(message.splitlines()) == 2


def test_a_rule_at_its_edge_holds():
    config = load_config({"CHRONO_SHARD_LEASE_TTL_MS": "2000", "CHRONO_TICK_MS": "200",
                          "CHRONO_WORKER_DEAD_AFTER_MISSED_HEARTBEATS": "2"})
    assert cross_field_problems(config) == []
