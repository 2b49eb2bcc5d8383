"""The beat's timing settings are checked together: a bad combination is refused at start."""

import pytest

from chronocore.config import ConfigError, load_config


def test_prepare_ahead_must_leave_room_for_a_scan_inside_the_lookahead():
    config = load_config({"CHRONO_PREPARE_AHEAD_MS": "50"})
    assert config.prepare_ahead_ms == 50
    with pytest.raises(ConfigError,
                       match="CHRONO_PREPARE_AHEAD_MS=1600 plus CHRONO_SCAN_INTERVAL_MS=500"):
        load_config({"CHRONO_PREPARE_AHEAD_MS": "1600", "CHRONO_SCAN_INTERVAL_MS": "500",
                     "CHRONO_LOOKAHEAD_MS": "2000"})
    with pytest.raises(ConfigError, match="CHRONO_PREPARE_AHEAD_MS must be at least 0"):
        load_config({"CHRONO_PREPARE_AHEAD_MS": "-1"})
